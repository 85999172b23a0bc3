package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/syncbridge/bridge/syncsafe"
)

// SyncthingConfigName is the home file with this side's Syncthing nudge
// settings (`bridge syncthing setup`). It holds the API key, so it is
// private (0600), like the keys.
const SyncthingConfigName = "syncthing.json"

// SyncthingConfig is where the local Syncthing's REST API is and which of
// its folders hold the bridge folder (NewNudger's arguments). A flag or an
// environment variable set for one of them wins over the file.
type SyncthingConfig struct {
	V       int    `json:"v"`
	API     string `json:"api"`
	Key     string `json:"key"`
	Folders string `json:"folders"`
}

// SyncthingConfig reads the home's Syncthing settings; none is the zero
// value.
func (h *Home) SyncthingConfig() (SyncthingConfig, error) {
	var c SyncthingConfig
	data, err := os.ReadFile(h.Path(SyncthingConfigName))
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	} else if err != nil {
		return c, err
	}
	if err := json.Unmarshal(data, &c); err != nil || c.V != 1 {
		return SyncthingConfig{}, WithHint(fmt.Errorf("read %s: not Syncthing settings (%v)", h.Path(SyncthingConfigName), err),
			"run `bridge syncthing setup` again, or remove the file")
	}
	return c, nil
}

// SaveSyncthingConfig writes the home's Syncthing settings.
func (h *Home) SaveSyncthingConfig(c SyncthingConfig) error {
	c.V = 1
	data, _ := json.MarshalIndent(c, "", "  ")
	return syncsafe.WriteFileAtomic(h.Path(SyncthingConfigName), append(data, '\n'))
}
