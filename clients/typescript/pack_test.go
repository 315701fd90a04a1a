package typescript

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The tarball a user installs (the README's npm pack) carries no script
// that runs at install: npm 11 warns about each one ("install scripts not
// yet covered by allowScripts"), and the tarball is built already. npm
// pack still builds it (prepack).
func TestThePackedClientHasNoInstallScripts(t *testing.T) {
	node(t)
	dir := t.TempDir()
	pack := exec.Command("npm", "pack", "--silent", "--pack-destination", dir)
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("npm pack: %v\n%s", err, out)
	}
	tgz, err := filepath.Glob(filepath.Join(dir, "*.tgz"))
	if err != nil || len(tgz) != 1 {
		t.Fatalf("npm pack wrote %v (%v)", tgz, err)
	}
	var manifest struct {
		Scripts map[string]string `json:"scripts"`
	}
	if err := json.Unmarshal(packedFile(t, tgz[0], "package/package.json"), &manifest); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"preinstall", "install", "postinstall", "prepare"} {
		if cmd, ok := manifest.Scripts[s]; ok {
			t.Errorf("the packed client runs %q at install (%s): npm 11 warns, and the tarball is built already", s, cmd)
		}
	}
	if len(packedFile(t, tgz[0], "package/dist/src/index.js")) == 0 {
		t.Error("the packed client holds no built dist/src/index.js")
	}
}

// packedFile is the file name in the gzipped tarball path.
func packedFile(t *testing.T, path, name string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	r := tar.NewReader(z)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s holds no %s", path, name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			b, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}
