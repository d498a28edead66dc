# ctest: LABELS package
"""cmake --install puts binaries, libraries, headers and a CMake package under a
prefix, and a project outside the tree builds against it with
find_package(ccrun CONFIG)."""
import os
import subprocess

from helpers import build_dir

CONSUMER_CMAKE = """cmake_minimum_required(VERSION 3.25)
project(consumer CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(ccrun CONFIG REQUIRED)
add_executable(consumer main.cpp)
target_link_libraries(consumer ccrun::store)
"""

CONSUMER_MAIN = """#include <ccrun/store_server.h>
#include <ccrun/tcp_store.h>
#include <iostream>
int main() {
  ccrun::store::StoreServer server({});
  server.start();
  ccrun::store::TcpStoreOptions opts;
  opts.port = server.port();
  ccrun::store::TcpStore store(opts);
  store.set("installed", "yes");
  std::cout << store.get("installed") << std::endl;
}
"""


def test_install_and_find_package(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", build_dir(), "--prefix", str(prefix)], check=True,
                   capture_output=True)
    assert (prefix / "bin" / "ccrun").exists() and (prefix / "bin" / "ccrun-rendezvous").exists()
    assert (prefix / "include" / "ccrun" / "store.h").exists()
    assert (prefix / "lib" / "cmake" / "ccrun" / "ccrunConfig.cmake").exists()
    src = tmp_path / "consumer"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(CONSUMER_CMAKE)
    (src / "main.cpp").write_text(CONSUMER_MAIN)
    b = tmp_path / "build"
    r = subprocess.run(["cmake", "-S", str(src), "-B", str(b), f"-DCMAKE_PREFIX_PATH={prefix}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["cmake", "--build", str(b)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    out = subprocess.run([str(b / "consumer")], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "yes"
