package cond

import (
	"errors"
	"testing"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		expr, ev, in string
		want         bool
		err          bool
	}{
		{`event.data.orderId == input.orderId`, `{"type":"order.paid","data":{"orderId":"o1"}}`, `{"orderId":"o1"}`, true, false},
		{`event.data.orderId == input.orderId`, `{"type":"order.paid","data":{"orderId":"o2"}}`, `{"orderId":"o1"}`, false, false},
		{`event.data.amount > 10.0`, `{"data":{"amount":12}}`, `{}`, true, false},
		{`event.type.startsWith("order.")`, `{"type":"order.paid"}`, ``, true, false},
		{`event.data.missing == 1`, `{"data":{}}`, `{}`, false, true},
		{`event.data.flag`, `{"data":{"flag":"yes"}}`, `{}`, false, true},
	}
	for _, c := range cases {
		p, err := Compile(c.expr)
		if err != nil {
			t.Fatalf("Compile(%q): %v", c.expr, err)
		}
		got, err := p.Match([]byte(c.ev), []byte(c.in))
		if got != c.want || (err != nil) != c.err {
			t.Errorf("%q on %s: got %v, %v; want %v, error %v", c.expr, c.ev, got, err, c.want, c.err)
		}
	}
}

func TestCompileRefuses(t *testing.T) {
	for _, expr := range []string{`event.data.orderId ==`, `1 + 2`, `"s"`, `unknown.x == 1`, ``} {
		if _, err := Compile(expr); !errors.Is(err, ErrInvalid) {
			t.Errorf("Compile(%q) = %v, want ErrInvalid", expr, err)
		}
	}
}

func TestCostLimit(t *testing.T) {
	p, err := Compile(`input.xs.all(a, input.xs.all(b, input.xs.all(c, a + b + c >= 0)))`)
	if err != nil {
		t.Fatal(err)
	}
	xs := `[` + repeat(`1`, 200) + `]`
	if ok, err := p.Match([]byte(`{}`), []byte(`{"xs":`+xs+`}`)); ok || err == nil {
		t.Fatalf("8M-step condition: got %v, %v; want the cost limit", ok, err)
	}
}

func repeat(s string, n int) string {
	out := s
	for range n - 1 {
		out += "," + s
	}
	return out
}

func FuzzCondition(f *testing.F) {
	for _, s := range []string{`event.data.orderId == input.orderId`, `event.type == "a"`, `true`, `(`, `input.x.all(y, y > 1)`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		p, err := Compile(expr)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Compile(%q): error %v does not wrap ErrInvalid", expr, err)
			}
			return
		}
		_, _ = p.Match([]byte(`{"type":"k","data":{"orderId":"o","n":[1,2,3]}}`), []byte(`{"orderId":"o","x":[1,2]}`))
	})
}
