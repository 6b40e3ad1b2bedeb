package sign_test

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/jetway-gw/jetway/sign"
)

// A client signs a request for its app with the app's secret (from jetway
// app create ID --hmac), naming the headers the signature covers.
func ExampleSign() {
	body := []byte(`{"sku":"A-1","qty":2}`)
	r, _ := http.NewRequest("POST", "https://api.example.com/v1/orders?b=2&a=1", strings.NewReader(string(body)))
	r.Header.Set("Content-Type", "application/json")
	secret := []byte("0123456789abcdef0123456789abcdef")
	if err := sign.Sign(r, body, "shop", secret, "content-type"); err != nil {
		fmt.Println(err)
		return
	}
	p, err := sign.Parse(r.Header.Get("Authorization"))
	fmt.Println(strings.HasPrefix(r.Header.Get("Authorization"), sign.Scheme+" "), p.App, err)
	// Output: true shop <nil>
}
