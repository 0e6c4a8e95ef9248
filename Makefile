# One-command setup and checks. `make test` and `make demo` work from a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/pip --disable-pip-version-check -q
CONSTRAINTS := requirements/constraints.txt

.PHONY: setup test lint typecheck pytest filecheck demo data clean

setup: $(STAMP)

# torch first and pinned: the CPU wheel (an unpinned torch pulls a multi-GB CUDA build);
# torchrec with --no-deps (its metadata asks for the CUDA fbgemm-gpu, which would replace the CPU one).
$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -c $(CONSTRAINTS) torch==2.13.0
	$(PIP) install -c $(CONSTRAINTS) -e '.[dev,bench]'
	$(PIP) install -c $(CONSTRAINTS) --no-deps torchrec==1.8.0
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MAKE) typecheck

# mypy on ir/, passes/, codegen/, runtime/ and the optimizers ([tool.mypy] in pyproject.toml says which files and how strict).
typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -q --durations=25

filecheck: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/lit -q tests/filecheck

test: lint pytest filecheck

# The main job, short version: DLRM on 2 local gloo ranks, compiled by SparseLift and trained
# side by side with DLRM-Baseline and TorchRec; prints where the time goes. Two shapes: Criteo
# Kaggle (one id per bag, dim 16: a small sparse path) and dlrm-bench (100 ids per bag, dim 64).
# Then a sequence model (DIN: unpooled 50-item histories) against TorchRec's EmbeddingCollection,
# and real data: MovieLens-100k (fetched by `make data` when missing), two models trained for
# 3 epochs by one process, TorchRec and SparseLift, their test AUCs side by side.
demo: $(STAMP)
	mkdir -p bench/out
	$(BIN)/python -m sparselift.data.movielens_fetch
	$(BIN)/sparselift bench dlrm --quick --steps 24 --rounds 4 --model dlrm-kaggle --world-size 2 \
		--json bench/out/demo.json --plot bench/out/demo.png
	$(BIN)/sparselift bench dlrm --quick --model dlrm-bench --world-size 2 \
		--json bench/out/demo-bench.json --plot bench/out/demo-bench.png
	$(BIN)/sparselift bench seq --quick --world-size 2 \
		--json bench/out/demo-seq.json --plot bench/out/demo-seq.png
	$(BIN)/sparselift bench quality --data movielens-100k --world-size 2 --sparse-optimizer rowwise-adagrad --lr 0.05 \
		--json bench/out/demo-movielens.json --plot bench/out/demo-movielens.png
	@echo "wrote bench/out/demo.json, demo.png, demo-bench.json, demo-bench.png, demo-seq.json, demo-seq.png,"
	@echo "demo-movielens.json and demo-movielens.png"
	@echo "real table sizes (33.8M-row Criteo Kaggle, 8 x 1M x 64 dlrm-bench; several minutes each):"
	@echo "  $(BIN)/sparselift bench dlrm --model dlrm-kaggle --rows-cap none --world-size 2"
	@echo "  $(BIN)/sparselift bench dlrm --model dlrm-bench --rows-cap 1000000 --world-size 2"
	@echo "  $(BIN)/sparselift bench seq --world-size 2   # DIN, 1M-row item and user tables"

# MovieLens-100k (GroupLens Research; research use, no redistribution) into $SPARSELIFT_DATA_DIR/ml-100k
# or ~/.cache/sparselift/data/ml-100k, never into the repository: the three data files are unpacked
# from the recbole wheel (pinned in requirements/constraints.txt), which is downloaded with --no-deps, never installed.
data: $(STAMP)
	$(BIN)/python -m sparselift.data.movielens_fetch

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache tests/filecheck/.lit_test_times.txt
