//! Headless Chromium for the tests that need a real browser (O6's console,
//! O3's dashboard screenshot): one way to run it, with a deadline, so that a
//! browser that hangs fails its test instead of holding CI. The browser
//! comes from Debian's `chromium` ([`crate::host_package::CHROMIUM`]).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Run `chromium --headless` on `url` with `arguments` (after the flags
/// every run takes), its profile in `profile_dir`: what it printed on
/// stdout (the DOM, with `--dump-dom`). Blocking: call it off an actor's
/// thread.
///
/// # Panics
/// If Chromium does not start, or runs longer than `wait_max` (it is
/// killed first).
pub fn headless(url: &str, arguments: &[String], profile_dir: &Path, wait_max: Duration) -> String {
    let mut child = Command::new("chromium")
        .args(["--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-extensions"])
        .arg(format!("--user-data-dir={}", profile_dir.display()))
        .args(arguments)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + wait_max;
    while child.try_wait().expect("wait for chromium").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium ran longer than {wait_max:?} on {url}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().expect("the reader thread")
}
