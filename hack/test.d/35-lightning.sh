# PyTorch Lightning for the live callback test (tests/sdk/test_lightning_live.py; sourced by
# hack/test.sh after 30-torch.sh). A cached virtual environment over Debian's python3 with
# --system-site-packages, so that it uses Debian's CPU torch: a constraints file pins torch to
# the installed build and pip pulls no PyPI torch (about 2.7 GB of CUDA wheels). rich 13.5.2 is
# the newest Lightning 2.0.9 accepts (rich 14 removed what its RichProgressBar calls).
# Exports SPECON_LIGHTNING_PYTHON: the interpreter that runs the Lightning job.
lightning_version=2.0.9
lightning_venv=${SPECON_LIGHTNING_VENV:-$HOME/.cache/specon-lightning-$lightning_version}
# (Importing pytorch_lightning over Debian's torch needs tests/sdk/lightning_job.py's
# workaround: the check reads the installed versions instead.)
if ! "$lightning_venv/bin/python" -c "import importlib.metadata as m, torch
assert m.version('pytorch-lightning') == '$lightning_version'
assert m.version('rich') == '13.5.2'" 2>/dev/null; then
  log "installing pytorch-lightning $lightning_version over Debian's torch in $lightning_venv"
  rm -rf "$lightning_venv"
  "$SPECON_TORCH_PYTHON" -m venv --system-site-packages "$lightning_venv"
  constraints=$(mktemp "${TMPDIR:-/tmp}/specon-lightning.XXXXXX")
  "$SPECON_TORCH_PYTHON" -c 'import torch; print("torch==" + torch.__version__)' >"$constraints"
  if ! "$lightning_venv/bin/python" -m pip install -q -c "$constraints" \
      "pytorch-lightning==$lightning_version" "rich==13.5.2"; then
    rm -f "$constraints"
    log "error: pip could not install pytorch-lightning $lightning_version into $lightning_venv"
    return 1
  fi
  rm -f "$constraints"
fi
export SPECON_LIGHTNING_PYTHON=$lightning_venv/bin/python
