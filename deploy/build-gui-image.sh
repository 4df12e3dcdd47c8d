#!/usr/bin/env bash
# Build the GUI image: the browser and desktop environments (src/openforge/environments) in a
# container or pod. It is FROM the local Debian base (deploy/build-debian-base.sh) and has
# Debian's chromium, Xvfb, openbox and the GUI venv at /opt/openforge/gui (Playwright,
# PyAutoGUI, Pillow: deploy/gui-requirements.txt), the same layout a set-up host has, so the
# environments' servers run unchanged. It has no sandboxd: the container and Kubernetes
# backends run it the way they run a task's own image, with the sandbox image mounted as the
# runtime (src/openforge/sandboxes/runtime.py).
#
#   deploy/build-gui-image.sh [IMAGE] [ENGINE] [BASE]
#   (defaults: localhost/openforge-gui:bookworm podman localhost/openforge-debian:bookworm)
#
# The wheels are fetched on this host with pip (its index and certificates), not inside the
# build, whose network may reach the Debian mirrors only: binary wheels for the image's
# Python (bookworm: 3.11, x86-64), and wheels built here from the pure-Python sdists
# (PyAutoGUI and its helpers publish no wheels). $SECURITY_MIRROR is where Debian's
# security suite is (chromium is updated only there; bookworm's main lags behind).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${1:-localhost/openforge-gui:bookworm}
ENGINE=${2:-podman}
BASE=${3:-localhost/openforge-debian:bookworm}
SECURITY_MIRROR=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}
PIP=${PIP:-.venv/bin/pip}
REQS=deploy/gui-requirements.txt
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/wheels" "$WORK/sdists"
# --no-deps: the list is the whole closure, and only then may pip take an sdist where no
# wheel fits the image's platform.
"$PIP" download -q --no-deps -d "$WORK/sdists" --python-version 3.11 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -r "$REQS"
mv "$WORK"/sdists/*.whl "$WORK/wheels/" 2>/dev/null || true
if compgen -G "$WORK/sdists/*" >/dev/null; then
  "$PIP" wheel -q --no-deps -w "$WORK/built" "$WORK"/sdists/*
  # A wheel built here is for this host's Python: only pure-Python ones fit the image.
  for w in "$WORK"/built/*.whl; do
    case "$w" in *-none-any.whl) mv "$w" "$WORK/wheels/" ;;
      *) echo "build-gui-image: $(basename "$w") is not pure Python and has no wheel for" \
              "the image's platform" >&2; exit 1 ;;
    esac
  done
fi
cp "$REQS" "$WORK/requirements.txt"
# Playwright drives Debian's chromium as the browser environment does (browser_server.py).
cat > "$WORK/check.py" <<'PYTHON'
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
    page = browser.new_page()
    page.set_content("<p>ok</p>")
    assert page.inner_text("p") == "ok"
    browser.close()
PYTHON
# The image's label: the tests (and users) can tell an image built from another list.
SOURCES=$(cat deploy/build-gui-image.sh "$REQS" | sha256sum | cut -c1-16)
cat > "$WORK/Dockerfile" <<DOCKERFILE
FROM $BASE
ENV LANG=C.UTF-8
RUN . /etc/os-release && \\
    echo "deb $SECURITY_MIRROR \$VERSION_CODENAME-security main" >/etc/apt/sources.list.d/security.list
# chromium: the browser environment's browser (Playwright drives it; Playwright's own browser
#   download is not used). xvfb, openbox: the desktop's display and window manager.
# python3, python3-venv: the venv below. libatomic1: Playwright's bundled node needs it.
#   python3-tk: PyAutoGUI imports MouseInfo, which exits the process without tkinter.
#   fonts-dejavu-core: without any font, pages render as boxes.
# xdotool, scrot, mousepad: what scripts/setup.sh gives a local desktop (OSWorld-format tasks
#   script windows with xdotool and launch mousepad, its text editor).
# Left out: other desktop apps OSWorld's own suites launch (LibreOffice, GIMP, VLC, Thunderbird,
#   VS Code), Chromium's drivers and sound; a task that needs them brings its own image.
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      chromium xvfb openbox python3 python3-venv libatomic1 python3-tk fonts-dejavu-core \\
      xdotool scrot mousepad && apt-get clean && rm -rf /var/lib/apt/lists/*
# The wheels are bind-mounted for this one step, so no layer keeps them.
RUN --mount=type=bind,source=.,target=/tmp/gui-build \\
    python3 -m venv /opt/openforge/gui && \\
    /opt/openforge/gui/bin/pip install -q --disable-pip-version-check --no-cache-dir \\
      --no-index --find-links /tmp/gui-build/wheels -r /tmp/gui-build/requirements.txt
# Fail the build, not the first rollout, when the browser or the desktop cannot start here.
RUN --mount=type=bind,source=.,target=/tmp/gui-build \\
    /opt/openforge/gui/bin/python /tmp/gui-build/check.py && \\
    { Xvfb :99 -nolisten tcp 2>/dev/null & x=\$!; \\
      while [ ! -e /tmp/.X11-unix/X99 ]; do kill -0 \$x || exit 1; sleep 0.1; done; \\
      : >/tmp/xauth; DISPLAY=:99 XAUTHORITY=/tmp/xauth /opt/openforge/gui/bin/python -c \\
        'import pyautogui; assert min(pyautogui.size()) > 0'; \\
      rc=\$?; kill \$x; wait \$x; rm -rf /tmp/xauth /tmp/.X11-unix /tmp/.X99-lock; exit \$rc; }
DOCKERFILE
"$ENGINE" build -q --label "openforge.dev/sources=$SOURCES" -t "$IMAGE" "$WORK" >/dev/null
echo "built $IMAGE ($("$ENGINE" image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
