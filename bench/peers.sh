# Sourced by the benchmark scripts: installs the peers they compare against, when
# missing. MinIO through `go install`; s5cmd, tusd and warp by building the exact
# module version (the module proxy refuses their version lists, see TOOLS.md); the
# aws cli through pip. Nothing is written into the repository.

export PATH="$(go env GOPATH)/bin:$HOME/.cargo/bin:$PATH"

build_module() { # module@version binary [package]
  local module=$1 binary=$2 package=${3:-.} dir
  dir=$(go mod download -json "$module" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  rm -rf "/tmp/$binary-src" && cp -r "$dir" "/tmp/$binary-src" && chmod -R u+w "/tmp/$binary-src"
  (cd "/tmp/$binary-src" && go build -mod=mod -o "$(go env GOPATH)/bin/$binary" "$package")
}

ensure_peers() { # any of: minio s5cmd aws rclone tusd warp
  local peer
  for peer in "$@"; do
    case $peer in
      minio) command -v minio >/dev/null || go install github.com/minio/minio@latest ;;
      s5cmd) command -v s5cmd >/dev/null || build_module github.com/peak/s5cmd/v2@v2.3.0 s5cmd ;;
      tusd) command -v tusd >/dev/null || build_module github.com/tus/tusd/v2@v2.10.1 tusd ./cmd/tusd ;;
      warp) command -v warp >/dev/null || GONOSUMDB=github.com/minio/warp build_module github.com/minio/warp@v1.0.0 warp ;;
      rclone) command -v rclone >/dev/null || go install github.com/rclone/rclone@latest ;;
      aws) { command -v aws >/dev/null && aws --version >/dev/null 2>&1; } || pip install --quiet awscli ;;
    esac
  done
}
