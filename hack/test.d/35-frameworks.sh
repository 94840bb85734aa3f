# PyTorch Lightning and Hugging Face transformers for the live callback tests (sourced by
# hack/test.sh after 30-torch.sh): the two cached environments of hack/lib/frameworks.sh, which
# hack/prepare.sh fills in the background when the whole suite runs. Exports
# SPECON_LIGHTNING_PYTHON and SPECON_TRANSFORMERS_PYTHON.
# shellcheck source=hack/lib/frameworks.sh
source "$ROOT/hack/lib/frameworks.sh"
framework_venvs "$SPECON_TORCH_PYTHON" || return 1
export SPECON_LIGHTNING_PYTHON=$SPECON_LIGHTNING_VENV/bin/python
export SPECON_TRANSFORMERS_PYTHON=$SPECON_TRANSFORMERS_VENV/bin/python
