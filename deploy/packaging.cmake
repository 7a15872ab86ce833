# The Debian package (`cpack -G DEB` in a build configured with -DCMAKE_INSTALL_PREFIX=/usr):
# ibprobe_<version>_amd64.deb with everything `cmake --install` puts in place (binaries, the
# TLS stand-ins, the hardened unit, /etc defaults and probe modules as conffiles, rules,
# dashboards and examples under /usr/share/ibprobe), its dependencies from dpkg-shlibdeps.
set(IBPROBE_PACKAGE_MAINTAINER "ibprobe maintainers <root@localhost>"
    CACHE STRING "Maintainer field of the Debian package")

configure_file(${CMAKE_CURRENT_LIST_DIR}/debian/conffiles.in
               ${CMAKE_BINARY_DIR}/debian/conffiles @ONLY)
file(COPY ${CMAKE_CURRENT_LIST_DIR}/debian/postinst ${CMAKE_CURRENT_LIST_DIR}/debian/prerm
          ${CMAKE_CURRENT_LIST_DIR}/debian/postrm
     DESTINATION ${CMAKE_BINARY_DIR}/debian)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ibprobe)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT ${IBPROBE_PACKAGE_MAINTAINER})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Prometheus exporter and verbs probes for InfiniBand and RoCE ports")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "ibprobe exports every port counter of the host's RDMA devices (data counters in bytes, error\ncounters in one family, saturation flags, driver hardware counters, port state) and runs\nperftest-style verbs probes between hosts on request, with the counter deltas seen during\nthe run.")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/ibprobe/ibprobe")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_BINARY_DIR}/debian/conffiles ${CMAKE_BINARY_DIR}/debian/postinst
    ${CMAKE_BINARY_DIR}/debian/prerm ${CMAKE_BINARY_DIR}/debian/postrm)
include(CPack)
