# bash completion for overbrainer: commands, options, target names from the project's
# overbrainer.toml and run IDs from its runs/. Installed by `overbrainer completion install`;
# printed by `overbrainer completion bash` (load it with `. FILE`).
_overbrainer() {
    local program=${COMP_WORDS[0]} current=${COMP_WORDS[COMP_CWORD]} answer
    # A program typed as ~/bin/overbrainer: bash leaves the tilde to us.
    case $program in "~/"*) program=$HOME/${program#"~/"} ;; esac
    answer=$(command "$program" __complete bash "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null) || return 0
    COMPREPLY=()
    case $answer in
        :dirs)
            compopt -o filenames 2>/dev/null
            local IFS=$'\n'
            COMPREPLY=($(compgen -d -- "$current"))
            ;;
        :words$'\n'*)
            local IFS=$'\n'
            COMPREPLY=(${answer#:words$'\n'})
            ;;
    esac
    return 0
}
complete -F _overbrainer overbrainer
