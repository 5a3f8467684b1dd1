module github.com/nqd-dev/nqd/sdk/go

go 1.25.0

require github.com/cenkalti/backoff/v5 v5.0.3

require github.com/coder/websocket v1.8.15
