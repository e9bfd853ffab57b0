# gmailrelay container image: a static binary on distroless, run as non-root.
#
#   docker build -t gmailrelay .
#   docker run -p 127.0.0.1:8080:8080 -v gmailrelay-data:/data \
#     -e GMAILRELAY_API_TOKEN=... -e GMAILRELAY_ADMIN_TOKEN=... gmailrelay
#
# Configuration is by GMAILRELAY_* environment variables (every `serve` flag
# has one: --quota-per-minute is GMAILRELAY_QUOTA_PER_MINUTE). Listening on
# 0.0.0.0 makes an API token mandatory: without GMAILRELAY_API_TOKEN the relay
# refuses to start. Without GMAILRELAY_CREDENTIALS it runs in sandbox mode
# against its embedded Gmail emulator (nothing reaches a real mailbox).
# See docs/operations.md.

# --- build: the same `go build` command .ci/run checks (deploy/deploy_test.go
# compares them).
FROM golang:1.26 AS build
WORKDIR /src
ENV GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/gmailrelay ./cmd/gmailrelay
# The volume's mount point, owned by the runtime user (distroless has no shell
# to create it there).
RUN mkdir -p /out/data

# --- run: no shell, no package manager; uid/gid 65532 ("nonroot").
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gmailrelay /gmailrelay
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV GMAILRELAY_DATA=/data/gmailrelay.db \
    GMAILRELAY_ADDR=0.0.0.0:8080
VOLUME ["/data"]
EXPOSE 8080
# distroless has no curl or wget: the binary asks /healthz itself.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/gmailrelay", "healthcheck", "--url", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/gmailrelay"]
CMD ["serve"]
