#!/usr/bin/env bash
# check-format.sh: fails, listing them, when tracked C files differ from what clang-format makes of them with the
# repository's .clang-format. Fix with: git ls-files '*.c' '*.h' '*.cpp' '*.cu' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format.sh: clang-format is not installed (scripts/setup.sh)" >&2; exit 2; }
bad=()
while IFS= read -r f; do
  clang-format --style=file "$f" | cmp -s - "$f" || bad+=("$f")
done < <(git ls-files '*.c' '*.h' '*.cpp' '*.cu')
if [ ${#bad[@]} -gt 0 ]; then
  printf 'not clang-format clean (%d files):\n' "${#bad[@]}" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix: git ls-files '*.c' '*.h' '*.cpp' '*.cu' | xargs clang-format -i" >&2
  exit 1
fi
echo "clang-format: $(git ls-files '*.c' '*.h' '*.cpp' '*.cu' | wc -l) files clean"
