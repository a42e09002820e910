# syntax=docker/dockerfile:1
# agentd: one image for both processes, `agentd worker` (the default) and `agentd serve`.
#   docker build -t agentd .
#   docker run --rm agentd --help
# The compose file builds it for its `worker` and `gateway` services.

# ---- build ----
FROM rust:1.95-slim-bookworm AS build
# C toolchain and cmake for aws-lc-sys (the TLS crypto backend); no OpenSSL is needed.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The registry and target caches survive between builds (BuildKit), so a source change
# rebuilds agentd only. Migrations and the trace page are compiled into the binary.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin agentd \
 && cp target/release/agentd /usr/local/bin/agentd

# ---- runtime ----
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app agentd
WORKDIR /app
# config/default.toml and prompts/ are read relative to the working directory.
COPY --from=build /usr/local/bin/agentd /usr/local/bin/agentd
COPY config/ /app/config/
COPY prompts/ /app/prompts/
USER agentd
EXPOSE 8787
ENTRYPOINT ["agentd"]
CMD ["worker"]
