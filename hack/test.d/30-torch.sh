# PyTorch for the example jobs and the tests marked `torch` (sourced by hack/test.sh).
# PyPI's torch wheels for Linux pull about 2.7 GB of CUDA packages, so the CPU build comes
# from Debian (python3-torch, for Debian's own python3); see docs/examples.md.
# Exports SPECON_TORCH_PYTHON: the interpreter that runs the example jobs.
torch_python=${SPECON_TORCH_PYTHON:-/usr/bin/python3}
installed=$(dpkg-query -W -f='${Status}\n' python3-torch python3-sklearn 2>/dev/null \
  | grep -c 'install ok installed' || true)
if [ "$installed" != 2 ]; then
  log "installing Debian's python3-torch and python3-sklearn (CPU PyTorch for the examples)"
  apt_cmd=(specon_apt)
  [ "$(id -u)" = 0 ] || apt_cmd=(sudo apt-get)
  if ! "${apt_cmd[@]}" install -y -q --no-install-recommends python3-torch python3-sklearn \
      >/dev/null; then
    "${apt_cmd[@]}" update -q >/dev/null
    nice -n 19 "${apt_cmd[@]}" install -y -q --no-install-recommends \
      python3-torch python3-sklearn >/dev/null
  fi
fi
if ! "$torch_python" -c 'import torch, sklearn' 2>/dev/null; then
  log "error: $torch_python cannot import torch and sklearn after the install"
  return 1
fi
export SPECON_TORCH_PYTHON=$torch_python
