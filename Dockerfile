# The streamd daemon: CPU-only torch and the shipped English model (package data, streamd/assets).
# Not built by the tests or CI of this repository (no container runtime there), so it is kept
# minimal; docs/deploy.md, "Docker and Kubernetes".
#   docker build -t streamd . && docker run --rm -p 8765:8765 streamd
FROM python:3.12-slim

ARG TORCH_VERSION=2.13.0
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 HOME=/tmp

# torch's CPU wheel first, from PyTorch's CPU index (the default index brings a multi-GB CUDA build)
RUN pip install "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu

WORKDIR /opt/streamd
COPY pyproject.toml README.md ./
COPY streamd ./streamd
RUN pip install ".[server]" && rm -rf streamd build \
    && mkdir -p /etc/streamd \
    && printf 'server:\n  host: 0.0.0.0\n  port: 8765\n' > /etc/streamd/streamd.yaml \
    && useradd --system --uid 10001 --no-create-home streamd

USER 10001
EXPOSE 8765
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/readyz')"
# SIGTERM drains: live streams get their finals and done within server.grace_seconds (10 s), then
# close_timeout (5 s): stop with `docker stop -t 20`
CMD ["streamd", "serve", "--config", "/etc/streamd/streamd.yaml"]
