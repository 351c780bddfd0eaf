//go:build !race

package virtio9p

const raceEnabled = false
