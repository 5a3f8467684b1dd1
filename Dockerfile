# Multi-stage build: a static nqd binary on a minimal, non-root image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
# The Go worker SDK's module, which go.mod replaces with ./sdk/go.
COPY sdk/go/go.mod sdk/go/go.sum ./sdk/go/
RUN go mod download
COPY . .
ARG VERSION=dev
# The same flags as make build.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/nqd ./cmd/server \
    && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/nqd /nqd
# The data directory exists in the image, owned by nonroot (65532), so a
# volume mounted there starts with that owner and the embedded store can
# write to it.
COPY --from=build --chown=65532:65532 /out/data /home/nonroot/data
USER nonroot:nonroot
ENV NQ_ADDR=0.0.0.0:8080 NQ_DATA_DIR=/home/nonroot/data
VOLUME /home/nonroot/data
EXPOSE 8080
# The image has no shell or curl: nqd probes its own /healthz.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 CMD ["/nqd", "-healthcheck"]
ENTRYPOINT ["/nqd"]
