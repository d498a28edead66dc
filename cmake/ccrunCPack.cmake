# cmake/ccrunCPack.cmake: the Debian packages, made by CPack from the install
# components (CMakeLists.txt): `cmake --build build --target package` writes
# build/packages/*.deb. Runtime dependencies are found by dpkg-shlibdeps from
# the binaries; the dev packages name the -dev packages of what the static
# libraries link. tests/integration/test_package.py unpacks and runs them.

set(CCRUN_PACKAGE_MAINTAINER "ccrun maintainers <ccrun@example.org>" CACHE STRING
    "The Maintainer of the Debian packages: \"Name <address>\"")

# Component -> package.
set(CCRUN_PACKAGE_runtime ccrun)
set(CCRUN_PACKAGE_dev ccrun-dev)
set(CCRUN_PACKAGE_nccl ccrun-nccl-dev)
set(CCRUN_COMPONENTS runtime dev)
if(CCRUN_HAVE_NCCL)
  list(APPEND CCRUN_COMPONENTS nccl)
endif()

# Every package's /usr/share/doc/<package>/{copyright,changelog.gz} (Debian
# policy 12.5 and 12.7). strip --strip-debug for the static libraries when
# stripping (CPACK_STRIP_FILES), as dh_strip does: CMake strips only
# programs and shared libraries.
configure_file(packaging/changelog.in ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog @ONLY)
# The copyright file carries, after ccrun's own, the notices of the libraries
# compiled into the programs (spdlog, yaml-cpp: their licenses ask that copies
# carry them), taken from their Debian packages so that they cannot drift.
set(ccrun_copyright ${CMAKE_CURRENT_BINARY_DIR}/packaging/copyright)
file(READ packaging/copyright copyright_text)
foreach(dep libspdlog-dev libyaml-cpp-dev)
  if(EXISTS /usr/share/doc/${dep}/copyright)
    file(READ /usr/share/doc/${dep}/copyright dep_text)
    string(APPEND copyright_text "\n\n---- compiled in, from Debian's ${dep}: ----\n\n${dep_text}")
  endif()
endforeach()
file(WRITE ${ccrun_copyright} "${copyright_text}")
execute_process(COMMAND gzip -9nf ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog)
foreach(c ${CCRUN_COMPONENTS})
  install(FILES ${ccrun_copyright} ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${CCRUN_PACKAGE_${c}} COMPONENT ${c})
endforeach()
foreach(c dev ${CCRUN_COLLECTIVES_COMPONENT})
  install(CODE "
    if(CMAKE_INSTALL_DO_STRIP)
      file(GLOB archives \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/libccrun_*.a\")
      foreach(a \${archives})
        execute_process(COMMAND ${CMAKE_STRIP} --strip-debug --enable-deterministic-archives \${a}
                        COMMAND_ERROR_IS_FATAL ANY)
      endforeach()
    endif()" COMPONENT ${c})
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ccrun)
set(CPACK_PACKAGE_VENDOR "ccrun")
set(CPACK_PACKAGE_CONTACT "${CCRUN_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_OUTPUT_FILE_PREFIX ${CMAKE_BINARY_DIR}/packages)
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL ${CCRUN_COMPONENTS})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SOURCE ccrun)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME ${CCRUN_PACKAGE_runtime})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION utils)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
    "launcher for distributed training jobs (torchrun-compatible)
ccrun starts the workers of a distributed training job on each node, keeps
the nodes in step (static, c10d and etcd rendezvous, elastic membership,
restarts) and reports the first failure and hung ranks. It takes torchrun's
flags and gives workers torchrun's environment, so PyTorch scripts run
unchanged; it launches any program. ccrun-rendezvous is the standalone store
(PyTorch's TCPStore protocol) a team's jobs meet on, with a hardened systemd
unit. Needs no CUDA.")

# The static libraries' link dependencies, as Debian's -dev packages.
set(dev_depends "libboost-dev, libspdlog-dev, nlohmann-json3-dev, libssl-dev")
if(CCRUN_COLLECTIVES_COMPONENT STREQUAL "dev")
  string(APPEND dev_depends ", libgloo-dev")
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_NAME ${CCRUN_PACKAGE_dev})
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${dev_depends}")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "launcher for distributed training jobs - development files
Headers, static libraries, a CMake package (find_package(ccrun)) and
pkg-config files of ccrun's store, rendezvous and agent libraries and, in
builds without NCCL, of the collectives workers link (process groups over
Gloo).")

get_filename_component(nccl_dir "${NCCL_LIBRARY}" DIRECTORY)
set(CPACK_DEBIAN_NCCL_PACKAGE_NAME ${CCRUN_PACKAGE_nccl})
set(CPACK_DEBIAN_NCCL_PACKAGE_SECTION libdevel)
# Its pkg-config file names where this build found CUDA and NCCL (-L/usr/local/...),
# which lintian calls an error: the override says why.
if(CCRUN_HAVE_NCCL)
  install(FILES packaging/ccrun-nccl-dev.lintian-overrides
          DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME ${CCRUN_PACKAGE_nccl}
          COMPONENT nccl)
endif()
set(CPACK_DEBIAN_NCCL_PACKAGE_DEPENDS "${CCRUN_PACKAGE_dev} (= ${PROJECT_VERSION}), libgloo-dev")
set(CPACK_COMPONENT_NCCL_DESCRIPTION
    "launcher for distributed training jobs - collectives with NCCL
The collectives library workers link (ccrun::collectives, pkg-config
ccrun-collectives): process groups over Gloo for host buffers and NCCL for
CUDA buffers. Linking it needs NVIDIA's CUDA runtime and NCCL, which Debian
main does not ship; this build found them in
${nccl_dir}.")

include(CPack)
