# tinyvmm: `make run` builds everything, fetches and builds the guest, and boots it with a NIC
# in a network namespace of its own; `make test` runs every test this machine can run.

GO      ?= go
BIN     := bin/tinyvmm
# The lab: bench e2e/boot/share/usernet against QEMU and the host, and the nested runner.
LAB     := bin/tinyvmm-lab
# --net user's network runs in this process of its own; tinyvmm looks for it next to itself.
USERNET := bin/tinyvmm-usernet
GUEST   := out/guest
NETNS   := tinyvmm0
TAP     := tap0
# The packages whose code runs goroutines; they get `go test -race`.
RACE_PKGS := ./devices/... ./virtio/... ./virtionet/... ./netbackend/... ./ratelimit/... ./vmm/... ./bench/... ./internal/... ./examples/virtqueue ./virtiofs/... ./sharefs/... ./usernetd/... ./userproc/...

.PHONY: all build guest l0-qemu run run-nested test test-unit test-nested vet fmt-check mod-check fuzz bench bench-device netns netns-down clean

all: build

build:
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -o $(BIN) .
	CGO_ENABLED=0 $(GO) build -o $(USERNET) ./cmd/tinyvmm-usernet
	CGO_ENABLED=0 $(GO) build -o $(LAB) ./cmd/tinyvmm-lab

guest:
	bash guest/build.sh
	bash guest/bench/build.sh

# Boots the default guest with a NIC on a tap inside namespace $(NETNS); the namespace is
# removed when the guest stops.
GUEST_IP := ip=10.0.2.15::10.0.2.1:255.255.255.0::eth0:off
# Without a KVM device, say so in one line before anything is built or created.
KVM ?= /dev/kvm
ifneq ($(filter run,$(MAKECMDGOALS)),)
ifeq ($(wildcard $(KVM)),)
$(error make run: no $(KVM) here; 'make run-nested' boots the same guest on nested KVM inside QEMU)
endif
endif
run: build guest
	bash scripts/netns.sh run $(NETNS) $(TAP) -- $(abspath $(BIN)) run --net tap=$(TAP) --append $(GUEST_IP) $(ARGS)

# For hosts without /dev/kvm: the same guest, booted by tinyvmm on the real KVM of a Linux that
# QEMU emulates (nested SVM under TCG, no host network). Non-interactive: L1 has tap0 at
# 10.0.2.1, as make run's namespace does, and the guest runs CMD with sh -c (a shell line:
# make run-nested CMD='ping -c 2 10.0.2.1 && echo ok'). FILES (host files or directories)
# go into L1's /files, shared into the guest, where CMD then runs:
# make run-nested FILES=mytest CMD='./mytest -test.v'. Only CMD's output is shown; L1's
# console and the runner's lines go to NESTED_LOG (their end is shown when the run fails).
CMD ?= ip addr show dev eth0
FILES ?=
NESTED_LOG ?= out/run-nested.log
run-nested: export TINYVMM_NESTED_CMD = $(CMD)
run-nested:
	@$(if $(wildcard $(GUEST)/vmlinux),,echo "run-nested: building the guest kernel first (minutes); output in $(NESTED_LOG)")
	@mkdir -p $(dir $(NESTED_LOG)) && $(MAKE) --no-print-directory build guest l0-qemu >$(NESTED_LOG) 2>&1 || { tail -n 30 $(NESTED_LOG); exit 1; }
	@$(LAB) nested -log $(NESTED_LOG) -probe-exits 0 -append "l1init.tap=$(TAP),10.0.2.1/24" \
		$(foreach f,$(FILES),-file $(f)) -- run --stats --net tap=$(TAP) \
		--append $(GUEST_IP) $(if $(strip $(FILES)),--share .) -- sh -c "$$TINYVMM_NESTED_CMD"

test: build guest fmt-check mod-check vet test-unit fuzz test-nested

# L1's emulator: QEMU 10.0 from bookworm-backports, unpacked into the user's cache beside the
# installed 7.2, under whose TCG Linux L2 guests die (test/nested/README.md, "Which QEMU").
# Without it (no Debian mirror), L1 runs under the installed QEMU.
l0-qemu:
	@bash test/nested/fetch-l0-qemu.sh || echo "warning: L1 runs under the installed QEMU, which can kill Linux L2 guests (test/nested/README.md, \"Which QEMU\")" >&2

# tinyvmm on real KVM inside a QEMU TCG guest with nested SVM (for hosts without /dev/kvm):
# the kvm/, vmm/, bench/e2e, bench/boot, bench/share and examples tests, l1init's root, and a Linux L2 guest booted by tinyvmm. About 2-5 minutes.
test-nested: build guest l0-qemu
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

# A short fuzzing pass over guest-controlled input (and the kernel loader). Each target runs
# for a count of executions (-fuzztime=Nx), about 15 s each here: the counts are what each target
# got through in that time while other builds and nested runs loaded both cores, so an idle
# machine finishes sooner. A count has no deadline: a duration -fuzztime fails at random when it
# expires while a worker is busy (go.dev/issue/75804). FUZZTIME=5m soaks each target for 5
# minutes instead; scripts/fuzz.sh then forgives that one failure, only when no reproducer was
# written to testdata/fuzz.
FUZZTIME ?=
FUZZ = FUZZTIME=$(FUZZTIME) GO=$(GO) bash scripts/fuzz.sh
fuzz:
	$(FUZZ) ./virtio/ FuzzQueue 400000x
	$(FUZZ) ./virtio/pci/ FuzzVirtioPCI 300000x
	$(FUZZ) ./boot/ FuzzLoad 500000x
	$(FUZZ) ./virtionet/ FuzzDeviceRings 10000x
	$(FUZZ) ./virtionet/ FuzzCtrlQueue 8000x
	$(FUZZ) ./virtiofs/ FuzzRequest 100000x
	$(FUZZ) ./usernetd/ FuzzDHCPReply 100000x

# The seed experiments at device level (the Go driver plays the guest; no KVM needed).
bench-device: build
	$(BIN) bench device $(ARGS)

# The whole path with the bench guest: tinyvmm vs the no-VM ceiling vs QEMU (the lab command).
bench: build guest
	$(LAB) bench e2e $(ARGS)

netns:
	bash scripts/netns.sh up $(NETNS) $(TAP)

netns-down:
	bash scripts/netns.sh down $(NETNS)

clean:
	rm -rf bin build out
