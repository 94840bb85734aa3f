# PyTorch Lightning and Hugging Face transformers for the live callback tests
# (tests/sdk/test_lightning_live.py, tests/sdk/test_hf_live.py). One cached virtual environment
# each, over Debian's python3 with --system-site-packages so that they use Debian's CPU torch: a
# constraints file pins torch to the installed build, so pip pulls no PyPI torch (about 2.7 GB
# of CUDA wheels). rich 13.5.2 is the newest Lightning 2.0.9 accepts (rich 14 removed what its
# RichProgressBar calls).
#
# Sourced by hack/prepare.sh (which fills the two in the background, beside the first pytest
# pass) and by hack/test.d/35-frameworks.sh (which finds them warm, or fills them itself when
# run alone). Needs a `log` function and the interpreter with Debian's torch ($1 of
# framework_venvs, default /usr/bin/python3).

SPECON_LIGHTNING_VENV=${SPECON_LIGHTNING_VENV:-$HOME/.cache/specon-lightning-2.0.9}
SPECON_TRANSFORMERS_VENV=${SPECON_TRANSFORMERS_VENV:-$HOME/.cache/specon-transformers-4.33.3}

# framework_venv TORCH_PYTHON DIR CHECK PACKAGE...: DIR holds PACKAGEs over Debian's torch once
# CHECK (Python reading installed versions: importing pytorch_lightning over Debian's torch
# needs tests/sdk/lightning_job.py's workaround) passes in it.
framework_venv() {
  local torch_python=$1 venv=$2 check=$3 constraints
  shift 3
  if "$venv/bin/python" -c "$check" 2>/dev/null; then
    return 0
  fi
  log "installing $* over Debian's torch in $venv"
  rm -rf "$venv"
  "$torch_python" -m venv --system-site-packages "$venv" || return 1
  constraints=$(mktemp "${TMPDIR:-/tmp}/specon-frameworks.XXXXXX")
  "$torch_python" -c 'import torch; print("torch==" + torch.__version__)' >"$constraints"
  if ! "$venv/bin/python" -m pip install -q -c "$constraints" "$@"; then
    rm -f "$constraints"
    log "error: pip could not install $* into $venv"
    return 1
  fi
  rm -f "$constraints"
}

# framework_venvs [TORCH_PYTHON]: both environments, each checked and filled when missing.
framework_venvs() {
  local torch_python=${1:-/usr/bin/python3}
  framework_venv "$torch_python" "$SPECON_LIGHTNING_VENV" "import importlib.metadata as m, torch
assert m.version('pytorch-lightning') == '2.0.9' and m.version('rich') == '13.5.2'" \
    pytorch-lightning==2.0.9 rich==13.5.2 &&
    framework_venv "$torch_python" "$SPECON_TRANSFORMERS_VENV" "import importlib.metadata as m, torch
assert m.version('transformers') == '4.33.3' and m.version('accelerate') == '0.23.0'" \
      transformers==4.33.3 accelerate==0.23.0
}
