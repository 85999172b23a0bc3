package syncthing

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	"github.com/syncbridge/bridge/syncsafe"
)

// ConfigName is the home file with this side's Syncthing nudge
// settings (`bridge syncthing setup`). It holds the API key, so it is
// private (0600), like the keys.
const ConfigName = "syncthing.json"

// Config is where the local Syncthing's REST API is and which of
// its folders hold the bridge folder (NewNudger's arguments). A flag or an
// environment variable set for one of them wins over the file.
type Config struct {
	V       int    `json:"v"`
	API     string `json:"api"`
	Key     string `json:"key"`
	Folders string `json:"folders"`
}

// LoadConfig reads the home's Syncthing settings; none is the zero
// value.
func LoadConfig(h *trust.Home) (Config, error) {
	var c Config
	data, err := os.ReadFile(h.Path(ConfigName))
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	} else if err != nil {
		return c, err
	}
	if err := json.Unmarshal(data, &c); err != nil || c.V != 1 {
		return Config{}, bridge.WithHint(fmt.Errorf("read %s: not Syncthing settings (%v)", h.Path(ConfigName), err),
			"run `bridge syncthing setup` again, or remove the file")
	}
	return c, nil
}

// SaveConfig writes the home's Syncthing settings.
func SaveConfig(h *trust.Home, c Config) error {
	c.V = 1
	data, _ := json.MarshalIndent(c, "", "  ")
	return syncsafe.WriteFileAtomic(h.Path(ConfigName), append(data, '\n'))
}
