//! `courrier completions` and `courrier man`: shell completions and the manual page, generated
//! from the same clap definitions the binary parses with, so they cannot drift from it.

use crate::error::CliError;
use clap::ValueEnum;
use std::io::Write;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// The completion script for `shell`, on standard output (source it, or install it where the
/// shell looks: e.g. `/usr/share/bash-completion/completions/courrier`).
pub fn completions(shell: Shell) -> Result<(), CliError> {
    let mut cmd = crate::command();
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    // Written whole once made: clap_complete panics on a write error, e.g. a closed pipe.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "courrier", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script).and_then(|()| out.flush()).map_err(CliError::Output)
}

/// The manual page in roff (`courrier man | man -l -`), of the whole command or of one
/// subcommand (`courrier man member add` -> courrier-member-add(1)).
pub fn man(path: &[String]) -> Result<(), CliError> {
    let mut cmd = crate::command();
    cmd.build();
    let mut name = "courrier".to_owned();
    for part in path {
        let Some(sub) = cmd.find_subcommand(part).cloned() else {
            return Err(crate::output::invalid(format!("no command {name} {part}")));
        };
        name = format!("{name}-{part}");
        cmd = sub;
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd).title(name).render(&mut page).map_err(CliError::Output)?;
    let mut out = std::io::stdout().lock();
    out.write_all(&page).and_then(|()| out.flush()).map_err(CliError::Output)
}
