# PatchSync: `make demo` runs the sample end to end, `make test` runs all that CI runs.
# Both install what is missing first (Debian packages through apt-get; sudo when not root).

SWIFT ?= swift
APT_PACKAGES := libseccomp2 libcurl4-openssl-dev zlib1g-dev libdeflate-dev libzstd-dev libssl-dev libsqlite3-dev pkg-config nginx openssl fiu-utils faketime strace chromium curl python3 python3-pip python3-venv zstd
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps demo test build release clean man fuzz lint format soak

FORMATTED := Sources Tests Examples Benchmarks Fuzz Package.swift

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi
	@python3 -c 'import jsonschema' 2>/dev/null || python3 -m pip install -q jsonschema \
	  || python3 -m pip install -q --break-system-packages jsonschema
	@# python-tuf, the independent TUF client of the interop tests, in its own virtual environment
	@# (cryptography: python-tuf's ecdsa and rsa signers, for repositories with those keys), and moto's
	@# S3 server, the S3-compatible store the upload tests run against on loopback
	@[ -x .venv-tuf/bin/python ] && .venv-tuf/bin/python -c 'import tuf, cryptography, moto.server, boto3' 2>/dev/null \
	  || { python3 -m venv .venv-tuf && .venv-tuf/bin/pip install -q 'tuf>=5,<8' 'cryptography>=41' 'moto[server]>=5,<6'; }

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release --product patchsync
	$(SWIFT) build -c release --product patchsync-sample

demo: release
	bash Examples/demo.sh .build/release

# House style is checked, not argued: swift-format with the checked-in .swift-format (fix with `make format`).
# The folders point one way (LAYERS.md): a back edge between them fails, and so does the check's self-test;
# no function of the library is over 60 lines, the Syncer stays under 1,000, the tests sleep at most 11 times.
lint:
	$(SWIFT) format lint --strict --recursive $(FORMATTED)
	python3 Scripts/layers.py
	python3 Scripts/layers.py --self-test
	python3 Scripts/house.py --check

format:
	$(SWIFT) format format --in-place --recursive $(FORMATTED)

# Then the tests of the staged tree once more as on a kernel without openat2 (a seccomp filter makes it
# fail with ENOSYS): the lookups' other path, one openat(O_NOFOLLOW) per component, is tested too.
STAGING_TESTS := StagingSafetyTests|RemoveTreeTests|FaithfulTreeTests|EndToEndTests|LiveLinkTests

test: deps lint
	$(SWIFT) build --build-tests
	bash Scripts/test-shards.sh $(SWIFT)
	python3 Tests/Seccomp/without_openat2.py $(SWIFT) test --skip-build --filter '$(STAGING_TESTS)'

# The two model tests at length, on a fresh random seed (printed first; SEED=N runs one again):
# the install model over 2,000 sequences, the release history over 200.
soak: deps
	$(SWIFT) build --build-tests
	@seed=$${SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; echo "soak seed: $$seed (SEED=$$seed make soak runs it again)"; \
	  PATCHSYNC_MODEL_SEED=$$seed PATCHSYNC_MODEL_SEQUENCES=2000 $(SWIFT) test --skip-build --filter InstallModel \
	  && PATCHSYNC_HISTORY_SEED=$$seed PATCHSYNC_HISTORY_SEQUENCES=200 $(SWIFT) test --skip-build --filter ReleaseHistory \
	  && echo "soak seed $$seed: passed"

# libFuzzer targets for the metadata parser, canonical JSON, the manifest and object decoders
# (FUZZ_SECONDS each, default 60); `make test` replays their seed corpus Fuzz/Corpus.
fuzz: deps
	bash Fuzz/run.sh

clean:
	rm -rf .build .build-fuzz .build-static

# Man pages (swift-argument-parser's generate-manual plugin) and bash/zsh/fish completions.
man: deps
	$(SWIFT) package --allow-writing-to-package-directory generate-manual --multi-page --configuration debug
	mkdir -p man completions
	cp .build/plugins/GenerateManual/outputs/patchsync/*.1 man/
	for shell in bash zsh fish; do .build/debug/patchsync --generate-completion-script $$shell > completions/patchsync.$$shell; done
