package registry

import (
	"context"
	"errors"
	"fmt"
)

// The app operations that make credentials, shared by the CLI and the admin
// API: each makes the secret, stores only what must be stored, and returns
// the secret once, with the app as stored.

// CreateApp stores a new app with one fresh API key (and a signing secret
// when withSecret): create only — two creates of one id cannot both
// succeed, the second overwriting the first one's key. It returns the key,
// the secret ("" without) and the app.
func (c *Client) CreateApp(ctx context.Context, a *App, withSecret bool) (key, secret string, _ *App, _ error) {
	key, rec, err := NewAPIKey()
	if err != nil {
		return "", "", nil, err
	}
	a.Keys = []AppKey{rec}
	a.HMACSecrets = nil
	if withSecret {
		sec, err := NewHMACSecret()
		if err != nil {
			return "", "", nil, err
		}
		a.HMACSecrets, secret = []HMACSecret{sec}, sec.Secret
	}
	if a.Status == "" {
		a.Status = AppActive
	}
	stored, err := c.PutApp(ctx, a, IfRevision(0))
	if errors.Is(err, ErrConflict) {
		return "", "", nil, fmt.Errorf("app %s exists already (rotate-key gives it a new key): %w", a.ID, err)
	}
	if err != nil {
		return "", "", nil, c.afterLanded(err, func(context.Context, *Client, uint64) error {
			return fmt.Errorf("app %s was created, but its API key was never shown: give it a new one (jetway app rotate-key %s)", a.ID, a.ID)
		})
	}
	return key, secret, stored, nil
}

// RotateAppKey gives an app one new API key; its others stop working.
func (c *Client) RotateAppKey(ctx context.Context, id string) (string, *App, error) {
	var key string
	a, err := c.UpdateApp(ctx, id, func(a *App) error {
		k, rec, err := NewAPIKey()
		key, a.Keys = k, []AppKey{rec}
		return err
	})
	if err != nil {
		return "", nil, c.afterLanded(err, func(context.Context, *Client, uint64) error {
			return fmt.Errorf("app %s has a new API key, but it was never shown: rotate it again (jetway app rotate-key %s)", id, id)
		})
	}
	if len(a.Keys) != 1 || a.Keys[0].SHA256 != KeyDigest(key) {
		return "", nil, fmt.Errorf("app %s: the stored key is not the new one; rotate it again", a.ID)
	}
	return key, a, nil
}

// RotateAppSecret gives an app one new signing secret; its others stop
// verifying.
func (c *Client) RotateAppSecret(ctx context.Context, id string) (string, *App, error) {
	var sec HMACSecret
	a, err := c.UpdateApp(ctx, id, func(a *App) error {
		s, err := NewHMACSecret()
		sec, a.HMACSecrets = s, []HMACSecret{s}
		return err
	})
	if err != nil {
		return "", nil, c.afterLanded(err, func(context.Context, *Client, uint64) error {
			return fmt.Errorf("app %s has a new signing secret, but it was never shown: rotate it again (jetway app rotate-secret %s)", id, id)
		})
	}
	return sec.Secret, a, nil
}
