//! Builds the C test suite (`tests/c/test_capi.c`) and the C examples
//! (`examples/c/pingpong.c`, `examples/c/rma.c`) with the system C compiler against the freshly
//! built `libxfer`, and runs them: dynamically linked, statically linked, and
//! under valgrind memcheck.
//!
//! `cargo test` does not build a cdylib/staticlib for integration tests, so
//! the first test to need the library runs `cargo build -p xfer-capi --lib`
//! (same profile and target directory as this test) and links against its
//! output. Valgrind runs when it is installed; set `XFER_REQUIRE_VALGRIND=1`
//! to make its absence a failure (CI does).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Longest a C program may run before it is killed and the test fails.
const RUN_LIMIT: Duration = Duration::from_secs(300);

struct Paths {
    /// The repository root (the workspace).
    root: PathBuf,
    /// Where libxfer.so and libxfer.a are.
    lib_dir: PathBuf,
    /// Scratch space for the compiled C programs.
    out_dir: PathBuf,
}

/// Builds libxfer once per test run and says where everything is.
fn paths() -> &'static Paths {
    static PATHS: OnceLock<Paths> = OnceLock::new();
    PATHS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
        // This binary is <target>/<profile>/deps/c_suite-<hash>.
        let exe = std::env::current_exe().expect("current_exe");
        let profile_dir = exe.parent().and_then(Path::parent).expect("profile dir").to_path_buf();
        let target_dir = profile_dir.parent().expect("target dir").to_path_buf();
        let profile = profile_dir.file_name().and_then(|p| p.to_str()).unwrap_or("debug");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .args(["build", "-p", "xfer-capi", "--lib", "--target-dir"])
            .arg(&target_dir)
            .current_dir(&root);
        if !cfg!(feature = "verbs") {
            // The library this test was built for: TCP-only.
            build.arg("--no-default-features");
        }
        match profile {
            "debug" => {}
            "release" => {
                build.arg("--release");
            }
            other => {
                build.args(["--profile", other]);
            }
        }
        let status = build.status().expect("run cargo build for libxfer");
        assert!(status.success(), "building libxfer failed");
        for lib in ["libxfer.so", "libxfer.a"] {
            assert!(
                profile_dir.join(lib).is_file(),
                "{lib} missing in {}",
                profile_dir.display()
            );
        }
        // Per profile: debug and release runs may overlap and share target/tmp.
        let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("c-{profile}"));
        std::fs::create_dir_all(&out_dir).expect("create scratch dir");
        Paths {
            root,
            lib_dir: profile_dir,
            out_dir,
        }
    })
}

/// Runs a command to completion within [`RUN_LIMIT`], capturing its output.
fn run(mut cmd: Command) -> Output {
    let what = format!("{cmd:?}");
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    wait_limited(child, &what)
}

fn wait_limited(mut child: Child, what: &str) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("collect output");
        }
        if start.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect output");
            panic!(
                "{what} ran longer than {RUN_LIMIT:?}; killed.\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn check(out: &Output, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{what}: {}\n{stdout}\n{stderr}", out.status);
    assert!(
        out.status.success(),
        "{what} failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}

/// Compiles a C program with the system compiler; `link` comes after the source.
fn compile(source: &str, output: &str, link: &[&str]) -> PathBuf {
    let p = paths();
    let exe = p.out_dir.join(output);
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.current_dir(&p.root)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pthread",
            "-g",
            "-Iinclude",
            source,
        ])
        .arg(format!("-L{}", p.lib_dir.display()))
        .args(link)
        .arg("-o")
        .arg(&exe);
    check(&run(cc), &format!("compiling {source}"));
    exe
}

fn dynamic_suite() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile("tests/c/test_capi.c", "test_capi", &["-lxfer"]))
}

/// A command for a dynamically linked program, finding libxfer the way the
/// README tells users to.
fn dynamic(exe: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env("LD_LIBRARY_PATH", &paths().lib_dir);
    cmd
}

#[test]
fn c_suite_dynamically_linked() {
    let out = run(dynamic(dynamic_suite()));
    check(&out, "tests/c/test_capi (libxfer.so)");
    assert!(String::from_utf8_lossy(&out.stdout).contains(" passed, 0 failed"));
}

#[test]
fn c_suite_statically_linked() {
    // What `rustc --print native-static-libs` lists for libxfer.a, less
    // rdma-core's libraries: the verbs provider opens those at run time, so
    // nothing in the archive refers to them.
    let link = [
        "-Wl,-Bstatic",
        "-lxfer",
        "-Wl,-Bdynamic",
        "-lgcc_s",
        "-lutil",
        "-lrt",
        "-lpthread",
        "-lm",
        "-ldl",
        "-lc",
    ];
    let exe = compile("tests/c/test_capi.c", "test_capi_static", &link);
    let ldd = run({
        let mut c = Command::new("ldd");
        c.arg(&exe);
        c
    });
    assert!(
        !String::from_utf8_lossy(&ldd.stdout).contains("libxfer"),
        "the static build must not need libxfer.so"
    );
    check(&run(Command::new(&exe)), "tests/c/test_capi (libxfer.a)");
}

#[test]
fn c_suite_under_valgrind() {
    let have = Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        assert!(
            std::env::var_os("XFER_REQUIRE_VALGRIND").is_none(),
            "XFER_REQUIRE_VALGRIND is set but valgrind is not installed (apt-get install valgrind)"
        );
        eprintln!("valgrind not installed: the memcheck run of the C suite is skipped");
        return;
    }
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "--tool=memcheck",
        "--error-exitcode=1",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite",
    ])
    .arg(dynamic_suite())
    .env("LD_LIBRARY_PATH", &paths().lib_dir);
    let out = run(cmd);
    check(&out, "tests/c/test_capi under valgrind");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("definitely lost: 0 bytes") || stderr.contains("no leaks are possible"));
}

/// Builds `examples/c/NAME.c` with exactly the documented command, starts
/// `NAME server`, runs `NAME client SERVER-NAME client_args...` against it
/// and returns the client's output, the server's remaining standard output
/// and whether the server succeeded.
fn run_example(name: &str, client_args: &[&str]) -> (Output, String, std::process::ExitStatus) {
    let p = paths();
    let exe = p.out_dir.join(name);
    let source = format!("examples/c/{name}.c");
    let mut cc = Command::new("cc");
    cc.current_dir(&p.root)
        .args([source.as_str(), "-Iinclude"])
        .arg(format!("-L{}", p.lib_dir.display()))
        .args(["-lxfer", "-o"])
        .arg(&exe);
    check(&run(cc), &format!("compiling {source}"));

    let mut server = dynamic(&exe)
        .arg("server")
        .env("XFER_TCP_ADDR", "127.0.0.1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("start the {name} server: {e}"));
    let mut lines = BufReader::new(server.stdout.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).expect("read the server's name");
    let prefix = format!("{name} server: ");
    let Some(server_name) = first.trim().strip_prefix(prefix.as_str()).map(str::to_string) else {
        let _ = server.kill();
        panic!("unexpected first line {first:?}");
    };

    let client = run({
        let mut c = dynamic(&exe);
        c.args(["client", &server_name])
            .args(client_args)
            .env("XFER_TCP_ADDR", "127.0.0.1");
        c
    });
    check(&client, &format!("{name} client"));

    let mut rest = String::new();
    lines.read_to_string(&mut rest).expect("read the server's output");
    let status = server.wait().expect("wait for the server");
    (client, rest, status)
}

/// The example builds with exactly the documented command and runs as two
/// processes.
#[test]
fn c_pingpong_example() {
    let (client, rest, status) = run_example("pingpong", &["200", "4096"]);
    assert!(String::from_utf8_lossy(&client.stdout).contains("200 rounds of 4096 bytes"));
    assert!(status.success(), "pingpong server: {status}\n{rest}");
    assert!(rest.contains("200 rounds of 4096 bytes done"), "{rest}");
}

/// The RMA example builds with exactly the documented command and runs as
/// two processes: the client gets, puts with immediate data, gets back.
#[test]
fn c_rma_example() {
    let (client, rest, status) = run_example("rma", &["100000"]);
    let out = String::from_utf8_lossy(&client.stdout);
    assert!(out.contains("got \"hello from the rma server\""), "{out}");
    assert!(out.contains("put and got 100000 bytes"), "{out}");
    assert!(status.success(), "rma server: {status}\n{rest}");
    assert!(
        rest.contains("client put 100000 bytes, immediate data 100000"),
        "{rest}"
    );
    assert!(rest.contains("rma server: done"), "{rest}");
}

/// `capi/install.sh` lays out a prefix whose `xfer.pc` lets a C build find
/// the header and the library with nothing but pkg-config.
#[test]
fn install_and_pkg_config() {
    if Command::new("pkg-config").arg("--version").output().is_err() {
        eprintln!("pkg-config not installed: the install test is skipped");
        return;
    }
    let p = paths();
    let prefix = p.out_dir.join("prefix");
    let _ = std::fs::remove_dir_all(&prefix);
    let mut install = Command::new("sh");
    install
        .arg(p.root.join("capi/install.sh"))
        .env("PREFIX", &prefix)
        .env("LIB_SRC", &p.lib_dir)
        .env_remove("DESTDIR")
        .env_remove("LIBDIR")
        .env_remove("INCLUDEDIR");
    check(&run(install), "capi/install.sh");
    for f in [
        "include/xfer.h",
        "lib/libxfer.so",
        "lib/libxfer.a",
        "lib/pkgconfig/xfer.pc",
    ] {
        assert!(prefix.join(f).is_file(), "{f} not installed");
    }

    let pkg_config = |args: &[&str]| {
        let mut c = Command::new("pkg-config");
        c.args(args).env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"));
        let out = run(c);
        check(&out, "pkg-config");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(pkg_config(&["--modversion", "xfer"]), env!("CARGO_PKG_VERSION"));
    let flags = pkg_config(&["--cflags", "--libs", "xfer"]);
    assert!(flags.contains("-lxfer"), "{flags}");
    assert!(pkg_config(&["--static", "--libs", "xfer"]).contains("-lpthread"));

    let exe = p.out_dir.join("pingpong_installed");
    let mut cc = Command::new("cc");
    cc.current_dir(&p.root)
        .arg("examples/c/pingpong.c")
        .args(flags.split_whitespace())
        .arg("-o")
        .arg(&exe);
    check(&run(cc), "compiling pingpong.c with pkg-config's flags");
    let mut usage = Command::new(&exe);
    usage.env("LD_LIBRARY_PATH", prefix.join("lib"));
    let out = run(usage);
    assert_eq!(out.status.code(), Some(2), "the example runs and prints its usage");
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage"));
}

/// libxfer.so exports exactly the functions the header declares.
#[test]
fn exported_symbols_match_the_header() {
    let p = paths();
    let header = std::fs::read_to_string(p.root.join("include/xfer.h")).expect("read include/xfer.h");
    let mut declared: Vec<String> = header
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('#') && !l.starts_with('/') && !l.starts_with('*'))
        .filter_map(|l| {
            let open = l.find('(')?;
            let name = l[..open].rsplit([' ', '*']).next()?;
            name.starts_with("xfer_").then(|| name.to_string())
        })
        .collect();
    declared.sort();
    let mut nm = Command::new("nm");
    nm.args(["-D", "--defined-only"]).arg(p.lib_dir.join("libxfer.so"));
    let out = run(nm);
    check(&out, "nm -D libxfer.so");
    let mut exported: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    exported.sort();
    assert!(!declared.is_empty());
    assert_eq!(
        exported, declared,
        "exports of libxfer.so vs functions in include/xfer.h"
    );
}
