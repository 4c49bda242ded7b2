# `make package` (cpack -G DEB): the Debian package of the agent and hub (issue 25). Included
# from the top-level CMakeLists.txt; tests/integration/debian_package.sh builds, inspects,
# installs, runs and purges it. What goes where, and why:
#   /usr/bin/ithbat                       stripped (the build tree's is ~140 MB with debug info)
#   /lib/systemd/system/ithbat-agent.service, ithbat-hub.service
#                                         installed, never enabled or started by the package
#   /etc/ithbat/agent.toml                the commented example config (a conffile)
#   /etc/default/ithbat-hub               the hub's flags (a conffile)
#   /usr/share/ithbat/{grafana,prometheus}  the dashboard and the alert rules with their tests
#   /usr/lib/ithbat/slurm/{prolog,epilog} Slurm's hooks (named in slurm.conf by the operator)
#   /usr/share/doc/ithbat/copyright       Apache-2.0 (Debian's copyright format)
# Runtime dependencies come from dpkg-shlibdeps over the binary, plus adduser for the hub's user
# and libcurl4, which the binary dlopens at its first outgoing request (src/net/curl_api.h) and
# so no longer names in DT_NEEDED.
include(GNUInstallDirs)

# The units name the binary by its installed path; the source copies name /usr/local/bin (the
# manual install in the README), the installed copies name where this build installs it.
foreach(_file ithbat-agent.service ithbat-hub.service slurm/prolog slurm/epilog)
  file(READ ${CMAKE_SOURCE_DIR}/packaging/${_file} _text)
  string(REPLACE "/usr/local/bin/ithbat" "${CMAKE_INSTALL_FULL_BINDIR}/ithbat" _text "${_text}")
  file(WRITE ${CMAKE_BINARY_DIR}/packaging/${_file} "${_text}")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/packaging/${_file})
endforeach()

install(TARGETS ithbat RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${CMAKE_BINARY_DIR}/packaging/ithbat-agent.service ${CMAKE_BINARY_DIR}/packaging/ithbat-hub.service
        DESTINATION /lib/systemd/system)
# Slurm's Prolog/Epilog (docs/slurm.md): slurm.conf names them, the package does not edit it.
install(PROGRAMS ${CMAKE_BINARY_DIR}/packaging/slurm/prolog ${CMAKE_BINARY_DIR}/packaging/slurm/epilog
        DESTINATION ${CMAKE_INSTALL_PREFIX}/lib/ithbat/slurm)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/agent.example.toml DESTINATION /etc/ithbat RENAME agent.toml
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/ithbat-hub.default DESTINATION /etc/default RENAME ithbat-hub)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/grafana/ithbat-dashboard.json DESTINATION ${CMAKE_INSTALL_DATADIR}/ithbat/grafana)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/prometheus/ithbat-alerts.yml
              ${CMAKE_SOURCE_DIR}/packaging/prometheus/ithbat-alerts.test.yml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/ithbat/prometheus)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/debian/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ithbat)
set(CPACK_PACKAGE_VENDOR "Ithbat")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "GPU fleet agent: is a slow run the job's fault or the infrastructure's?")
set(CPACK_PACKAGE_DESCRIPTION
    "One agent per GPU node collects GPU counters (NVML), eBPF probes on libcuda and libnccl, the jobs' own output, "
    "and scheduler, storage, network and kernel-log state, and diagnoses slow or broken training and inference "
    "runs as the job's doing or the infrastructure's, with the evidence. The hub does the same across the fleet.")
set(CPACK_PACKAGE_CONTACT "Ithbat developers <ithbat-dev@localhost>")
set(CPACK_RESOURCE_FILE_LICENSE ${CMAKE_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, libcurl4 (>= 7.88.0)")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_SOURCE_DIR}/packaging/debian/postinst
    ${CMAKE_SOURCE_DIR}/packaging/debian/prerm ${CMAKE_SOURCE_DIR}/packaging/debian/postrm
    ${CMAKE_SOURCE_DIR}/packaging/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_OUTPUT_FILE_PREFIX ${CMAKE_BINARY_DIR}/package)
include(CPack)
