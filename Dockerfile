# Optional: a Docker (BuildKit) build of the certdrift image, for those who build images with a
# container daemon. The release image is `make image` (scripts/image: no daemon, no base image
# pulled; docs/install.md), which is what CI builds and test/release inspects. This file is not
# built here, where no container daemon runs: deploy/deploy_test.go checks its stages and user
# and runs its `go build` line to prove the binary is static and stamped, nothing more.
#
#   docker build --build-arg VERSION=$(scripts/version.sh) \
#     --build-arg REVISION=$(scripts/version.sh --commit) \
#     --build-arg CREATED=$(scripts/version.sh --date) -t certdrift:$(scripts/version.sh) .

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# scripts/version.sh's values; without them the binary reports the module's build info ("dev").
ARG VERSION=
ARG REVISION=
ARG CREATED=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${REVISION} -X main.date=${CREATED}" -o /out/certdrift ./cmd/certdrift

# scratch: nothing but the binary and the system roots, which the served-view chain checks use
# for certificates from public CAs. No shell, no package manager, nothing to patch.
FROM scratch
ARG VERSION=
ARG REVISION=
ARG CREATED=
LABEL org.opencontainers.image.title=certdrift \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${REVISION} \
      org.opencontainers.image.created=${CREATED} \
      org.opencontainers.image.source=https://github.com/certdrift/certdrift
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/certdrift /usr/local/bin/certdrift
# 65532: the conventional "nonroot" id (distroless); the Deployment's securityContext matches it.
USER 65532:65532
EXPOSE 9809
ENTRYPOINT ["/usr/local/bin/certdrift"]
CMD ["serve"]
