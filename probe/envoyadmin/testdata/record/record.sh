#!/bin/sh
# record.sh ENVOY_BINARY OUT_DIR — start a real Envoy on loopback with envoy.yaml.tmpl, certificates
# minted here with openssl (a CA, and leaves signed by it; keys stay in a temp dir that is removed),
# make one TLS handshake per SNI so the listener stats move, then save the admin outputs into OUT_DIR.
# Fails if any saved file contains a PEM private key.
set -eu
ENVOY=$1; OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=$(mktemp -d /tmp/certdrift-record.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT
ADMIN_PORT=${ADMIN_PORT:-29901}; STATIC_PORT=${STATIC_PORT:-29902}
mkdir -p "$DIR/ca" "$DIR/static" "$DIR/sds/certs" "$DIR/inline" "$OUT"

leaf() { # leaf DIR CN SAN DAYS
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1/tls.key" \
    -subj "/CN=$2" -out "$1/tls.csr" 2>/dev/null
  printf 'subjectAltName=%s\n' "$3" > "$1/ext"
  openssl x509 -req -in "$1/tls.csr" -CA "$DIR/ca/ca.crt" -CAkey "$DIR/ca/ca.key" -set_serial "$5" \
    -days "$4" -extfile "$1/ext" -out "$1/tls.crt" 2>/dev/null
}
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$DIR/ca/ca.key" -subj "/CN=certdrift record CA" \
  -days 30 -set_serial 0x00ABCDEF01 -out "$DIR/ca/ca.crt" 2>/dev/null
leaf "$DIR/static" static.example.com "DNS:static.example.com,IP:127.0.0.1" 10 0x0102
leaf "$DIR/sds/certs" sds.example.com "DNS:sds.example.com,DNS:*.sds.example.com,URI:spiffe://example.com/ns/default/sa/sds" 20 0x0A0B0C
leaf "$DIR/inline" inline.example.com "DNS:inline.example.com" 5 0x7F
# Intermediate-free chains on purpose except the SDS one, which carries the CA too.
cat "$DIR/sds/certs/tls.crt" "$DIR/ca/ca.crt" > "$DIR/sds/certs/chain.crt"
cat > "$DIR/sds/cert.yaml" <<YAML
resources:
- "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
  name: kubernetes://default/sds-cert
  tls_certificate:
    certificate_chain: { filename: $DIR/sds/certs/chain.crt }
    private_key: { filename: $DIR/sds/certs/tls.key }
    watched_directory: { path: $DIR/sds/certs }
YAML
cat > "$DIR/sds/ca.yaml" <<YAML
resources:
- "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
  name: kubernetes://default/sds-ca
  validation_context:
    trusted_ca: { filename: $DIR/ca/ca.crt }
YAML
indent() { sed 's/^/          /' "$1"; }
awk -v dir="$DIR" -v ap="$ADMIN_PORT" -v sp="$STATIC_PORT" \
    -v chain="$(indent "$DIR/inline/tls.crt")" -v key="$(indent "$DIR/inline/tls.key")" '
  { gsub(/@DIR@/, dir); gsub(/@ADMIN_PORT@/, ap); gsub(/@STATIC_PORT@/, sp) }
  /^@INLINE_CHAIN@$/ { print chain; next }
  /^@INLINE_KEY@$/ { print key; next }
  { print }' "$HERE/envoy.yaml.tmpl" > "$DIR/envoy.yaml"

"$ENVOY" -c "$DIR/envoy.yaml" --disable-hot-restart -l warning --log-path "$DIR/envoy.log" &
PID=$!
ADMIN=http://127.0.0.1:$ADMIN_PORT
for i in $(seq 1 100); do curl -fsS "$ADMIN/ready" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS "$ADMIN/ready" >/dev/null
for sni in static.example.com sds.example.com inline.example.com; do
  # static_tls requires a client certificate: this handshake fails on purpose (connection_error).
  curl -sk --max-time 5 --resolve $sni:$STATIC_PORT:127.0.0.1 https://$sni:$STATIC_PORT/ >/dev/null 2>&1 || true
done
if [ -n "${KEEP:-}" ]; then echo "admin at $ADMIN, config in $DIR"; wait "$PID"; fi
get() { curl -fsS "$ADMIN$1" -o "$OUT/$2"; }
get /certs certs.json
get /config_dump config_dump.json
# What the certdrift client asks for (see ../../client.go): masked dumps and a filtered /stats.
get '/config_dump?mask=static_secrets,dynamic_active_secrets,dynamic_warming_secrets' config_dump_mask_secrets.json
get '/config_dump?mask=static_listeners,dynamic_listeners' config_dump_mask_listeners.json
get '/config_dump?resource=dynamic_active_secrets' config_dump_resource_dynamic_active_secrets.json
get /stats stats.txt
# Must equal statsFilter in ../../stats.go (a test checks).
STATS_FILTER='^(server\.(uptime|days_until_first_cert_expiring|seconds_until_first_ocsp_response_expiring)|control_plane\.connected_state|cluster\..+\.upstream_cx_connect_fail|sds\..+\.(key_rotation_failed|update_success|update_rejected|update_failure|update_time)|.+\.ssl_context_update_by_sds|.+\.ssl\.(handshake|connection_error|no_certificate|fail_verify_[a-z_]+)|.+\.ssl\.certificate\..+\.expiration_unix_time_seconds)$'
curl -fsS -G --data-urlencode "filter=$STATS_FILTER" "$ADMIN/stats" -o "$OUT/stats_filtered.txt"
get /server_info server_info.json
"$ENVOY" --version | grep -o 'version: .*' > "$OUT/version.txt"
if grep -rl "PRIVATE KEY" "$OUT"; then echo "refusing: private key material in $OUT" >&2; exit 1; fi
echo "recorded $($ENVOY --version | grep -o '/1\.[0-9.]*/') into $OUT"
