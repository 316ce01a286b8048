package adminclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/smssmq/smss/admin/adminapi"
)

// ErrUnauthorized is returned by Client when the server wants a (different)
// token.
var ErrUnauthorized = errors.New("admin API: unauthorized (wrong or missing admin.token)")

// Client reads the admin JSON API; smssctl's stats and top use it.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
}

// NewClient returns a client for the admin endpoint at baseURL
// ("127.0.0.1:12380" or "http://host:port"); token may be "".
func NewClient(baseURL, token string) (*Client, error) {
	if baseURL == "" {
		return nil, errors.New("admin API: no address (set admin.listen on the server and pass its address)")
	}
	if !strings.Contains(baseURL, "://") {
		baseURL = "http://" + baseURL
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("admin API address %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("admin API address %q: scheme must be http or https", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("admin API address %q: no host", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &Client{base: u, token: token, hc: &http.Client{Timeout: 10 * time.Second}}, nil
}

// Get fetches path (e.g. "/api/topics") and decodes the JSON answer into v.
func (c *Client) Get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base.String()+path, nil)
	if err != nil {
		return fmt.Errorf("admin API %s: %w", path, err)
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("admin API %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin API %s: read: %w", path, err)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return ErrUnauthorized
	}
	if resp.StatusCode != http.StatusOK {
		var e adminapi.ErrorBody
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("admin API %s: %s: %s", path, resp.Status, e.Error)
		}
		return fmt.Errorf("admin API %s: %s", path, resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("admin API %s: decode: %w", path, err)
	}
	return nil
}
