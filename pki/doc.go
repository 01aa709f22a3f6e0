// Package pki parses certificates and keys as hostile input and answers the questions certdrift
// asks of them: identity (SHA-256 fingerprint, SPKI hash, serial as an integer), whether a key
// matches a certificate, which CA in a bundle verifies a leaf, bundle hygiene and weak crypto.
//
// It never keeps or returns private key bytes: a private key is parsed only to derive its public
// half, which is all a key/cert match needs.
package pki
