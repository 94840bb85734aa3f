# PyTorch Lightning and Hugging Face transformers for the live callback tests
# (tests/sdk/test_lightning_live.py, tests/sdk/test_hf_live.py; sourced by hack/test.sh after
# 30-torch.sh). One cached virtual environment each, over Debian's python3 with
# --system-site-packages so that they use Debian's CPU torch: a constraints file pins torch to
# the installed build, so pip pulls no PyPI torch (about 2.7 GB of CUDA wheels).
# rich 13.5.2 is the newest Lightning 2.0.9 accepts (rich 14 removed what its RichProgressBar
# calls). Exports SPECON_LIGHTNING_PYTHON and SPECON_TRANSFORMERS_PYTHON.

# framework_venv DIR CHECK PACKAGE...: DIR holds PACKAGEs over Debian's torch once CHECK (Python
# reading installed versions: importing pytorch_lightning over Debian's torch needs
# tests/sdk/lightning_job.py's workaround) passes in it.
framework_venv() {
  local venv=$1 check=$2 constraints
  shift 2
  if "$venv/bin/python" -c "$check" 2>/dev/null; then
    return 0
  fi
  log "installing $* over Debian's torch in $venv"
  rm -rf "$venv"
  "$SPECON_TORCH_PYTHON" -m venv --system-site-packages "$venv"
  constraints=$(mktemp "${TMPDIR:-/tmp}/specon-frameworks.XXXXXX")
  "$SPECON_TORCH_PYTHON" -c 'import torch; print("torch==" + torch.__version__)' >"$constraints"
  if ! "$venv/bin/python" -m pip install -q -c "$constraints" "$@"; then
    rm -f "$constraints"
    log "error: pip could not install $* into $venv"
    return 1
  fi
  rm -f "$constraints"
}

lightning_venv=${SPECON_LIGHTNING_VENV:-$HOME/.cache/specon-lightning-2.0.9}
framework_venv "$lightning_venv" "import importlib.metadata as m, torch
assert m.version('pytorch-lightning') == '2.0.9' and m.version('rich') == '13.5.2'" \
  pytorch-lightning==2.0.9 rich==13.5.2
export SPECON_LIGHTNING_PYTHON=$lightning_venv/bin/python

transformers_venv=${SPECON_TRANSFORMERS_VENV:-$HOME/.cache/specon-transformers-4.33.3}
framework_venv "$transformers_venv" "import importlib.metadata as m, torch
assert m.version('transformers') == '4.33.3' and m.version('accelerate') == '0.23.0'" \
  transformers==4.33.3 accelerate==0.23.0
export SPECON_TRANSFORMERS_PYTHON=$transformers_venv/bin/python
