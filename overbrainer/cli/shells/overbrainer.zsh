# zsh completion for overbrainer: commands, options, target names from the project's
# overbrainer.toml and run IDs from its runs/. Installed by `overbrainer completion install`;
# printed by `overbrainer completion zsh` (load it with `source FILE` after compinit).
_overbrainer() {
    local program=${words[1]/#\~/$HOME}
    local -a answer candidates
    answer=("${(@f)$(command $program __complete zsh "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    case ${answer[1]} in
        :dirs) _files -/ ;;
        :words)
            candidates=("${(@)answer[2,-1]}")
            (( ${#candidates} )) && _describe -t overbrainer 'overbrainer' candidates
            ;;
    esac
}
if (( ! $+functions[compdef] )); then
    autoload -Uz compinit && compinit
fi
compdef _overbrainer overbrainer
