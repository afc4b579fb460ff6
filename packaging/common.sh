# Shared by build-deb and build-tarball: resolves the inputs and stages the files both
# packages carry. Sourced, not run. Everything that reaches an archive gets a fixed mtime,
# owner and mode here or in the caller, so two builds of one commit are byte-identical.
#
# Inputs (environment):
#   AGENTPRISM_BIN            agentprism binary (default target/release/agentprism)
#   AGENTPRISM_WORKFLOW_BIN   agentprism-workflow binary (default target/release/agentprism-workflow)
#   AGENTPRISM_VERSION        package version (default: Cargo.toml's)
#   AGENTPRISM_SKIP_COMPLETIONS=1  ship no shell completions (a binary without `completions`)
#   SOURCE_DATE_EPOCH         timestamp for every file (default: the last commit's time)
#   OUT_DIR                   where packages go (default target/package)

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
umask 022
export LC_ALL=C TZ=UTC

bin=${AGENTPRISM_BIN:-$repo_root/target/release/agentprism}
workflow_bin=${AGENTPRISM_WORKFLOW_BIN:-$repo_root/target/release/agentprism-workflow}
out_dir=${OUT_DIR:-$repo_root/target/package}
for file in "$bin" "$workflow_bin"; do
  [[ -x $file ]] || {
    echo "packaging: $file is not an executable; run \`cargo build --release\` or set AGENTPRISM_BIN / AGENTPRISM_WORKFLOW_BIN" >&2
    exit 1
  }
done

if [[ -z ${AGENTPRISM_VERSION:-} ]]; then
  AGENTPRISM_VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo_root/Cargo.toml" | head -n 1)
fi
version=$AGENTPRISM_VERSION

if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$repo_root" log -1 --format=%ct 2>/dev/null) || {
    echo "packaging: not a git checkout; set SOURCE_DATE_EPOCH" >&2
    exit 1
  }
fi
export SOURCE_DATE_EPOCH

# stage_completions DIR_BASH DIR_ZSH DIR_FISH: asks the binary for its completion scripts.
stage_completions() {
  if [[ ${AGENTPRISM_SKIP_COMPLETIONS:-} == 1 ]]; then
    return
  fi
  local shell target
  for shell in bash zsh fish; do
    case $shell in
      bash) target=$1/agentprism ;;
      zsh) target=$2/_agentprism ;;
      fish) target=$3/agentprism.fish ;;
    esac
    mkdir -p "$(dirname "$target")"
    "$bin" completions "$shell" >"$target" || {
      echo "packaging: \`$bin completions $shell\` failed; set AGENTPRISM_SKIP_COMPLETIONS=1 to build without completions" >&2
      exit 1
    }
    chmod 0644 "$target"
  done
}

# normalize DIR: fixed modes (0755 folders and executables, 0644 the rest) and mtimes.
normalize() {
  find "$1" -type d -exec chmod 0755 {} +
  find "$1" -type f -perm /111 -exec chmod 0755 {} +
  find "$1" -type f ! -perm /111 -exec chmod 0644 {} +
  find "$1" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}

# license_text: the license file, or a note naming the license when the tree has none.
license_text() {
  local file
  for file in LICENSE LICENSE-APACHE LICENSE.md; do
    if [[ -f $repo_root/$file ]]; then
      cat "$repo_root/$file"
      return
    fi
  done
  printf 'agentprism is licensed under the Apache License, Version 2.0\n(https://www.apache.org/licenses/LICENSE-2.0).\n'
}
