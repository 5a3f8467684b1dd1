package wiring

import "testing"

func TestBrowseURL(t *testing.T) {
	for _, tt := range []struct{ addr, base, want string }{
		{"127.0.0.1:8080", "", "http://127.0.0.1:8080/"},
		{"0.0.0.0:8080", "/ui", "http://127.0.0.1:8080/ui/"},
		{"[::]:9000", "/ui/", "http://127.0.0.1:9000/ui/"},
		{"[::1]:9000", "", "http://[::1]:9000/"},
	} {
		if got := browseURL(tt.addr, tt.base); got != tt.want {
			t.Errorf("browseURL(%q, %q) = %q, want %q", tt.addr, tt.base, got, tt.want)
		}
	}
}
