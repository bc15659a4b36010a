//! What a packager installs besides the binary: shell completion scripts
//! (clap_complete) and the man page (clap_mangen), both made from the clap
//! definitions in [`crate::args`], so they say what `--help` says.

use std::io::Write;

use anyhow::Context;
use clap::CommandFactory;

use crate::args::Cli;

/// `sluice completions SHELL`: the script on standard output.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "sluice", &mut out);
    write_out(&out)
}

/// `sluice man`: the man page of `sluice` and, after it, one section per
/// subcommand, in roff on standard output.
pub fn man() -> anyhow::Result<()> {
    let command = Cli::command();
    let mut out = Vec::new();
    let page = clap_mangen::Man::new(command.clone());
    // clap_mangen's own list of subcommands names pages (sluice-put(1))
    // that are not installed: each command is a section of this page.
    page.render_title(&mut out)
        .and_then(|_| page.render_name_section(&mut out))
        .and_then(|_| page.render_synopsis_section(&mut out))
        .and_then(|_| page.render_description_section(&mut out))
        .and_then(|_| page.render_options_section(&mut out))
        .context("cannot render the man page")?;
    writeln!(out, ".SH COMMANDS")?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        writeln!(
            out,
            ".TP\n\\fBsluice {}\\fR\n{} (see SLUICE {} below)",
            sub.get_name(),
            about.replace('\\', "\\\\"),
            sub.get_name().to_uppercase()
        )?;
    }
    page.render_extra_section(&mut out)
        .and_then(|_| page.render_version_section(&mut out))
        .context("cannot render the man page")?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        writeln!(out, ".SH \"SLUICE {}\"", sub.get_name().to_uppercase())?;
        let page = clap_mangen::Man::new(sub.clone());
        page.render_description_section(&mut out)
            .and_then(|_| page.render_options_section(&mut out))
            .context("cannot render the man page")?;
    }
    writeln!(out, ".SH ENVIRONMENT")?;
    for (name, variable) in crate::environment::variables() {
        let readers: Vec<&str> = variable
            .readers
            .iter()
            .map(|(path, _, _)| path.trim_start_matches("sluice "))
            .collect();
        let (_, flag, doc) = &variable.readers[0];
        writeln!(
            out,
            ".TP\n\\fB{name}\\fR ({flag}; {})\n{}",
            readers.join(", "),
            doc.replace('\\', "\\\\")
        )?;
    }
    for (name, doc) in crate::azure::VARIABLES {
        writeln!(
            out,
            ".TP\n\\fB{name}\\fR (az:// locations)\n{}",
            doc.replace('\\', "\\\\")
        )?;
    }
    for (name, doc) in crate::gcs::VARIABLES {
        writeln!(
            out,
            ".TP\n\\fB{name}\\fR (gs:// locations)\n{}",
            doc.replace('\\', "\\\\")
        )?;
    }
    write_out(&out)
}

fn write_out(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|_| stdout.flush()) {
        // `sluice man | head` closes the pipe early: not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to standard output"),
    }
}
