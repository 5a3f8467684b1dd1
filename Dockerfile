# Multi-stage build: a static nqd binary on a minimal, non-root image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/nqd ./cmd/server

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/nqd /nqd
USER nonroot:nonroot
ENV NQ_ADDR=0.0.0.0:8080 NQ_DATA_DIR=/home/nonroot/data
VOLUME /home/nonroot/data
EXPOSE 8080
ENTRYPOINT ["/nqd"]
