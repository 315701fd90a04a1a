package devserver

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	"github.com/temporalio/ui-server/v2/server/server_options"
)

// UI is the Temporal Web UI served from ui-server's embedded assets.
type UI struct {
	server *uiserver.Server
	URL    string
}

// StartUI serves the Web UI on ip:port against the Temporal frontend.
func StartUI(ip string, port int, temporalHostPort, namespace string) (*UI, error) {
	// ui-server's Start exits the process when it cannot listen, so the
	// port is checked here, where a clear error can be returned.
	if err := portFree(ip, port); err != nil {
		return nil, fmt.Errorf("temporal ui: %w", err)
	}
	cfg := &uiconfig.Config{
		Host:                ip,
		Port:                port,
		TemporalGRPCAddress: temporalHostPort,
		EnableUI:            true,
		DefaultNamespace:    namespace,
		HideLogs:            true,
		DisableNewsFetch:    true,
		CORS:                uiconfig.CORS{CookieInsecure: true},
	}
	s := uiserver.NewServer(server_options.WithConfigProvider(cfg))
	go func() { _ = s.Start() }()
	u := &UI{server: s, URL: "http://" + net.JoinHostPort(ip, strconv.Itoa(port))}
	// Wait until it answers, so the printed URL works when it is printed.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(u.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			return u, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return u, fmt.Errorf("temporal ui: not answering on %s", u.URL)
}

// Stop stops the UI server.
func (u *UI) Stop() { u.server.Stop() }
