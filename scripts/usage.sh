# Sourced first by the shell scripts beside it, with their arguments: given
# -h or --help, prints the calling script's header comment and exits.
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
  exit 0
fi
