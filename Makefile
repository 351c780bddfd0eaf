# tinyvmm: `make run` builds everything, fetches and builds the guest, and boots it with a NIC
# in a network namespace of its own; `make test` runs every test this machine can run.

GO      ?= go
BIN     := bin/tinyvmm
# --net user's network runs in this process of its own; tinyvmm looks for it next to itself.
USERNET := bin/tinyvmm-usernet
GUEST   := out/guest
NETNS   := tinyvmm0
TAP     := tap0
# The packages whose code runs goroutines; they get `go test -race`.
RACE_PKGS := ./devices/... ./virtionet/... ./vmm/... ./bench/... ./internal/... ./examples/virtqueue ./virtio9p/... ./virtiofs/... ./sharefs/... ./usernet/... ./userproc/...

.PHONY: all build guest run run-nested test test-unit test-nested vet fmt-check mod-check fuzz bench bench-device netns netns-down clean

all: build

build:
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -o $(BIN) .
	CGO_ENABLED=0 $(GO) build -o $(USERNET) ./cmd/tinyvmm-usernet

guest:
	bash guest/build.sh
	bash guest/bench/build.sh

# Boots the default guest with a NIC on a tap inside namespace $(NETNS); the namespace is
# removed when the guest stops.
GUEST_IP := ip=10.0.2.15::10.0.2.1:255.255.255.0::eth0:off
run: build guest
	@[ -e /dev/kvm ] || echo "make run: no /dev/kvm here; 'make run-nested' boots the guest on nested KVM inside QEMU" >&2
	bash scripts/netns.sh run $(NETNS) $(TAP) -- $(abspath $(BIN)) run --net tap=$(TAP) --append $(GUEST_IP) $(ARGS)

# For hosts without /dev/kvm: the same guest, booted by tinyvmm on the real KVM of a Linux that
# QEMU emulates (nested SVM under TCG, no host network). Non-interactive: the guest brings eth0 up
# with ip= and shows it; pass another command with CMD='...' (no quoting inside: words are split).
CMD ?= ip addr show dev eth0
run-nested: build guest
	$(GO) run ./test/nested/cmd/nested -probe-exits 0 -- run --stats --net tap=$(TAP) \
		--append $(GUEST_IP) -- $(CMD)

test: build guest fmt-check mod-check vet test-unit fuzz test-nested

# tinyvmm on real KVM inside a QEMU TCG guest with nested SVM (for hosts without /dev/kvm):
# the kvm/, vmm/, bench/e2e, bench/boot and bench/share tests, and a Linux L2 guest booted by tinyvmm. About 2-5 minutes.
test-nested: build guest
	TINYVMM_NESTED=1 $(GO) test -count=1 -v -timeout 60m ./test/nested

test-unit:
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -race $(RACE_PKGS)

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

# go.mod and go.sum say exactly what the code imports (go mod tidy).
mod-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run 'go mod tidy'"; exit 1; }

# A short fuzzing pass over guest-controlled input; longer with FUZZTIME=5m.
FUZZTIME ?= 15s
# The virtio-fs request parser counts executions: 10000000x is the full run.
VIRTIOFS_FUZZ ?= 100000x
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzQueue -fuzztime=$(FUZZTIME) ./devices/
	$(GO) test -run='^$$' -fuzz=FuzzVirtioPCI -fuzztime=$(FUZZTIME) ./devices/
	$(GO) test -run='^$$' -fuzz=FuzzLoad -fuzztime=$(FUZZTIME) ./boot/
	$(GO) test -run='^$$' -fuzz=FuzzDeviceRings -fuzztime=$(FUZZTIME) ./virtionet/
	$(GO) test -run='^$$' -fuzz=FuzzCtrlQueue -fuzztime=$(FUZZTIME) ./virtionet/
	$(GO) test -run='^$$' -fuzz=FuzzRequest -fuzztime=$(FUZZTIME) ./virtio9p/
	$(GO) test -run='^$$' -fuzz=FuzzRequest -fuzztime=$(VIRTIOFS_FUZZ) ./virtiofs/

# The seed experiments at device level (the Go driver plays the guest; no KVM needed).
bench-device: build
	$(BIN) bench device $(ARGS)

# The whole path with the bench guest: tinyvmm vs the no-VM ceiling vs QEMU.
bench: build guest
	$(BIN) bench e2e $(ARGS)

netns:
	bash scripts/netns.sh up $(NETNS) $(TAP)

netns-down:
	bash scripts/netns.sh down $(NETNS)

clean:
	rm -rf bin build out
