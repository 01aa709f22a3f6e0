package envoyadmin

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	// Registered for the type resolver: these are the messages certdrift reads out of Anys.
	_ "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
)

// legacyTypes maps v2 type names, which old Envoys print in /config_dump, to the v3 messages that
// replaced them with the same field names for everything certdrift reads.
var legacyTypes = map[string]string{
	"envoy.admin.v2alpha.SecretsConfigDump":   "envoy.admin.v3.SecretsConfigDump",
	"envoy.admin.v2alpha.ListenersConfigDump": "envoy.admin.v3.ListenersConfigDump",
	"envoy.api.v2.Listener":                   "envoy.config.listener.v3.Listener",
	"envoy.api.v2.auth.Secret":                "envoy.extensions.transport_sockets.tls.v3.Secret",
	"envoy.api.v2.auth.DownstreamTlsContext":  "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
	"envoy.api.v2.auth.UpstreamTlsContext":    "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
}

// typeName is the message name of a type URL, with v2 names mapped to v3.
func typeName(url string) string {
	name := url[strings.LastIndexByte(url, '/')+1:]
	if v3, ok := legacyTypes[name]; ok {
		return v3
	}
	return name
}

// placeholder stands in for every message type the resolver does not know. With DiscardUnknown
// all its fields are dropped, so an Envoy extension missing from go-control-plane (or a private
// one) costs nothing and fails nothing; the entry is skipped where it would have been read.
// It is a dynamic message with no fields rather than emptypb.Empty, because protojson gives the
// well-known Empty a special JSON form that would reject an extension's fields.
var placeholder = func() protoreflect.MessageType {
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:        proto.String("certdrift/envoyadmin/placeholder.proto"),
		Package:     proto.String("certdrift.envoyadmin"),
		Syntax:      proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Unknown")}},
	}, nil)
	if err != nil {
		panic("envoyadmin: placeholder descriptor: " + err.Error()) // a constant descriptor: impossible
	}
	return dynamicpb.NewMessageType(fd.Messages().Get(0))
}()

// resolver finds message types in the global registry and never fails: unknown type URLs resolve to
// placeholder.
type resolver struct{}

func (resolver) FindMessageByName(name protoreflect.FullName) (protoreflect.MessageType, error) {
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(name); err == nil {
		return mt, nil
	}
	return placeholder, nil
}

func (r resolver) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	return r.FindMessageByName(protoreflect.FullName(typeName(url)))
}

func (resolver) FindExtensionByName(field protoreflect.FullName) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByName(field)
}

func (resolver) FindExtensionByNumber(m protoreflect.FullName, n protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByNumber(m, n)
}

// unmarshalOpts is how every admin JSON document is decoded: unknown fields and enum values are
// ignored so that newer and older Envoys parse, and unknown Any types never fail the decode.
var unmarshalOpts = protojson.UnmarshalOptions{DiscardUnknown: true, Resolver: resolver{}}

// decodeProto decodes one JSON object into m.
func decodeProto(raw json.RawMessage, m proto.Message) error {
	return unmarshalOpts.Unmarshal(raw, m)
}

// errUnknownType says an Any holds a type certdrift cannot read.
var errUnknownType = errors.New("unknown type")

// unpack decodes an Any that went through the resolver into a new message of its (v3) type.
func unpack(a *anypb.Any) (proto.Message, error) {
	if a == nil {
		return nil, errors.New("missing")
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(typeName(a.GetTypeUrl())))
	if err != nil {
		return nil, fmt.Errorf("%w %q", errUnknownType, a.GetTypeUrl())
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(a.GetValue(), m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", a.GetTypeUrl(), err)
	}
	return m, nil
}

// peekType reads the "@type" of a JSON object without decoding the rest.
func peekType(raw json.RawMessage) (string, error) {
	var t struct {
		Type string `json:"@type"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", err
	}
	return t.Type, nil
}

// jsonErr makes a JSON syntax error say where it is, since admin bodies are large.
func jsonErr(what string, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%s: invalid JSON at byte %d: %w", what, se.Offset, err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("%s: unexpected JSON shape (%s where %s expected at %q)", what, te.Value, te.Type, te.Field)
	}
	return fmt.Errorf("%s: %w", what, err)
}
