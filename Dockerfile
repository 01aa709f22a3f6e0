# certdrift image: a static binary (CGO_ENABLED=0) on an empty base, running as a non-root user.
# deploy/deploy_test.go checks these properties and runs this file's `go build` line to prove the
# binary is static; it cannot build the image itself where no container daemon runs.
#
#   docker build --build-arg VERSION=v0.1.0 --build-arg REVISION=$(git rev-parse HEAD) -t certdrift .

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${REVISION}" -o /out/certdrift ./cmd/certdrift

# scratch: nothing but the binary and the system roots, which the served-view chain checks use
# for certificates from public CAs. No shell, no package manager, nothing to patch.
FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/certdrift /usr/local/bin/certdrift
# 65532: the conventional "nonroot" id (distroless); the Deployment's securityContext matches it.
USER 65532:65532
EXPOSE 9809
ENTRYPOINT ["/usr/local/bin/certdrift"]
CMD ["serve"]
