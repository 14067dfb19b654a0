//! The Python producers (`scripts/python_producers.py`): whether Python has a client
//! package, and the script's path.

use std::process::Command;

/// Whether `python3` can import `module`. When not: panics under `CI`,
/// `ONCELY_REQUIRE_SERVICES` or `ONCELY_REQUIRE_PYTHON` (`.ci/run` installs the packages),
/// else prints a loud SKIPPED line for `test` and returns false.
pub fn python_has(test: &str, module: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let why = format!(
            "python3 module {module} is not installed (pip install pika nats-py redis paho-mqtt)"
        );
        if crate::services::required() || std::env::var_os("ONCELY_REQUIRE_PYTHON").is_some() {
            panic!("{test}: {why}");
        }
        oncely_testkit::services::skipped(test, &why);
    }
    ok
}

/// The path of `scripts/python_producers.py`.
pub fn script() -> String {
    oncely_testkit::services::workspace_root()
        .join("scripts/python_producers.py")
        .display()
        .to_string()
}
