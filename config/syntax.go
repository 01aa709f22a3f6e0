package config

import (
	"errors"
	"strings"

	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// syntaxError places a YAML syntax error. yaml.v3 reports the line where the enclosing block
// began, not where the problem is (a bad indent on line 4 of a list that starts on line 1 says
// "line 1"), and no column. goccy/go-yaml's parser reports the token at fault, so it is asked
// again on this error path only; yaml.v3 stays the decoder. When goccy finds no error (the two
// parsers disagree), yaml.v3's own message is kept.
func syntaxError(data []byte, v3err error) *FieldError {
	msg := strings.TrimPrefix(v3err.Error(), "yaml: ")
	_, err := parser.ParseBytes(data, 0)
	var se interface {
		GetMessage() string
		GetToken() *token.Token
	}
	if err == nil || !errors.As(err, &se) || se.GetToken() == nil || se.GetToken().Position == nil {
		if m := lineRE.FindStringSubmatch(msg); m != nil {
			// Still yaml.v3's line: say what it is rather than pretend it is the problem's.
			return &FieldError{Msg: "YAML syntax error near line " + m[1] + ": " + m[2]}
		}
		return &FieldError{Msg: "YAML syntax error: " + msg}
	}
	pos := se.GetToken().Position
	return &FieldError{Line: pos.Line, Column: pos.Column, Msg: "YAML syntax error: " + se.GetMessage()}
}
