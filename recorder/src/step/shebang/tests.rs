use super::*;

fn lit(w: &str) -> Word {
    Word::Literal(w.to_string())
}

/// A script in a directory of its own under the system's temporary directory.
fn script(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rtit-shebang-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn a_last_exec_is_read_as_words_and_anything_more_is_not() {
    let shim = "#!/usr/bin/env bash\nset -e\nprogram=\"${0##*/}\"\nexec \"/root/.pyenv/libexec/pyenv\" exec \"$program\" \"$@\"\n\n";
    assert_eq!(
        last_exec(shim),
        Some(vec![
            lit("/root/.pyenv/libexec/pyenv"),
            lit("exec"),
            Word::Expands("\"$program\"".into()),
            Word::Args
        ])
    );
    assert_eq!(
        last_exec("#!/bin/sh\nexec /bin/true # done\n"),
        Some(vec![lit("/bin/true")]),
        "a comment after it"
    );
    assert_eq!(
        last_exec("#!/bin/sh\nexec '/opt/my app/run' -x $@\n# the end\n"),
        Some(vec![lit("/opt/my app/run"), lit("-x"), Word::Args])
    );
    for not_read in [
        "exec >log 2>&1",
        "exec foo | bar",
        "exec \"unclosed",
        "execute x",
        "echo exec x",
    ] {
        assert_eq!(last_exec(not_read), None, "{not_read}");
    }
}

#[test]
fn words_are_quoted_only_where_a_shell_needs_it() {
    assert_eq!(quote("/usr/bin/python3"), "/usr/bin/python3");
    assert_eq!(quote("print(1)"), "'print(1)'");
    assert_eq!(quote("it's"), "'it'\\''s'");
    assert_eq!(quote(""), "''");
}

#[test]
fn a_wrapper_is_advised_by_the_program_it_execs_and_its_shell() {
    let path = script("wrapper", "#!/bin/sh\n# runs true\nexec /bin/true\n");
    let advice = ScriptAdvice::new(&path, &["ignored".into()]).to_string();
    let p = path.display();
    assert_eq!(
        advice,
        format!("{p} is a script (#!/bin/sh) that ends in `exec /bin/true`, and rtit cannot follow execve yet: record the program it runs, `rtit record -- /bin/true`")
    );
    // Its own arguments passed on, an expansion it cannot tell.
    std::fs::write(&path, "#!/bin/sh -e\nexec true --x \"$@\"\n").expect("write");
    let advice = ScriptAdvice::new(&path, &["a b".into()]).to_string();
    let t = find_on_path("true").expect("true on PATH");
    assert!(
        advice.contains(&format!("`rtit record -- {} --x 'a b'`", t.display())),
        "{advice}"
    );
    // sh running the wrapper would stop at its `exec`: not suggested.
    assert!(!advice.contains("running the script"), "{advice}");
    std::fs::write(&path, "#!/bin/sh\nexec \"$JAVA\" -jar app.jar\n").expect("write");
    let advice = ScriptAdvice::new(&path, &[]).to_string();
    assert!(
        advice.ends_with(&format!("ends in `exec \"$JAVA\" -jar app.jar`, and rtit cannot follow execve yet: record the program it runs, or sh running the script, `rtit record -- /bin/sh {p}`")),
        "{advice}"
    );
    std::fs::remove_dir_all(path.parent().expect("dir")).ok();
}

#[test]
fn an_interpreter_env_finds_is_named_and_followed_to_its_program() {
    let path = script("hello.py", "#!/usr/bin/env -S python3 -u\nprint('hi')\n");
    let advice = ScriptAdvice::new(&path, &[]).to_string();
    let prefix = format!(
        "{} is a script (#!/usr/bin/env -S python3 -u), and rtit cannot follow execve yet: record python3 running it, `rtit record -- ",
        path.display()
    );
    let command = advice.strip_prefix(&prefix).unwrap_or_else(|| panic!("{advice}"));
    let program = command.split(' ').next().expect("a program");
    // python3 on PATH may be a pyenv shim: the advice names the ELF program behind it.
    let mut magic = [0u8; 4];
    use std::io::Read;
    std::fs::File::open(program)
        .and_then(|mut f| f.read_exact(&mut magic))
        .expect("the program");
    assert_eq!(&magic, b"\x7fELF", "{advice}");
    assert!(command.ends_with(&format!(" -u {}`", path.display())), "{advice}");
    std::fs::write(&path, "#!/usr/bin/env no-such-interpreter-rtit\n").expect("write");
    let advice = ScriptAdvice::new(&path, &[]).to_string();
    assert!(
        advice.ends_with("record its interpreter running it; no-such-interpreter-rtit is not found"),
        "{advice}"
    );
    std::fs::write(&path, "#!\n").expect("write");
    let advice = ScriptAdvice::new(&path, &[]).to_string();
    assert!(
        advice.ends_with(
            "(#!), and rtit cannot follow execve yet: record its interpreter running it; the #! line names none"
        ),
        "{advice}"
    );
    std::fs::remove_dir_all(path.parent().expect("dir")).ok();
}
