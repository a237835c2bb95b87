# Sourced by the server installs. `once NAME` prints the server's path and exits when it
# is installed and runs (the caller's `installed` and `bin`); otherwise it takes
# $root/NAME.lock, held until the caller exits, so that one install runs at a time (the
# tests of several binaries may ask at once), and checks again once it holds it: the
# install before it may have left the server there.
once() {
  if installed; then
    echo "$bin"; exit 0
  fi
  mkdir -p "$root"
  command -v flock >/dev/null || return 0
  exec 9>"$root/$1.lock"
  flock 9
  if installed; then
    echo "$bin"; exit 0
  fi
}
