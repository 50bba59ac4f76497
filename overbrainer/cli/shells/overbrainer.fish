# fish completion for overbrainer: commands, options, target names from the project's
# overbrainer.toml and run IDs from its runs/. Installed by `overbrainer completion install`
# in fish's completions directory; printed by `overbrainer completion fish`.
function __overbrainer_complete
    set -l words (commandline -opc)
    set -l program $words[1]
    set -e words[1]
    set -l current (commandline -ct)
    set -l answer (command $program __complete fish $words "$current" 2>/dev/null)
    or return 0
    switch "$answer[1]"
        case :dirs
            __fish_complete_directories "$current"
        case :words
            set -e answer[1]
            printf '%s\n' $answer
    end
end
complete -c overbrainer -f -a '(__overbrainer_complete)'
