# syntax=docker/dockerfile:1
# The streamd daemon: CPU-only torch and the shipped English model (package data, streamd/assets).
# Not built by the tests or CI of this repository (no container runtime there), so it is kept
# minimal; docs/deploy.md, "Docker and Kubernetes".
#   docker build -t streamd . && docker run --rm -p 8765:8765 streamd
# Without the internet: a folder of wheels in the build context (torch's CPU wheel, the `server`
# extra's dependencies, setuptools to build this package; docs/deploy.md says how to fill it), then
#   docker build --build-arg WHEELS=wheels -t streamd .
FROM python:3.12-slim

ARG TORCH_VERSION=2.13.0
# a folder of the build context holding every wheel the image needs ("": the package indexes)
ARG WHEELS=""
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 HOME=/tmp

# torch's CPU wheel first, from PyTorch's CPU index (the default index brings a multi-GB CUDA build),
# or from the wheel folder
RUN --mount=type=bind,target=/context \
    if [ -n "$WHEELS" ]; then pip install --no-index --find-links "/context/$WHEELS" "torch==${TORCH_VERSION}"; \
    else pip install "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu; fi

WORKDIR /opt/streamd
COPY pyproject.toml README.md ./
COPY streamd ./streamd
# The image's drain fits Docker's default stop timeout (10 s, `docker stop`): grace_seconds 4 +
# close_timeout 4.  For the defaults (10 + 5 s) mount a config with them and stop with
# `docker stop -t 20` (`docker run --stop-timeout 20`).
RUN --mount=type=bind,target=/context \
    if [ -n "$WHEELS" ]; then pip install --no-index --find-links "/context/$WHEELS" ".[server]"; \
    else pip install ".[server]"; fi \
    && rm -rf streamd build \
    && mkdir -p /etc/streamd \
    && printf 'server:\n  host: 0.0.0.0\n  port: 8765\n  grace_seconds: 4\n  close_timeout: 4\n' > /etc/streamd/streamd.yaml \
    && useradd --system --uid 10001 --no-create-home streamd

USER 10001
EXPOSE 8765
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/readyz')"
# SIGTERM drains: live streams get their finals and done within server.grace_seconds, then the
# connections left close within server.close_timeout
CMD ["streamd", "serve", "--config", "/etc/streamd/streamd.yaml"]
