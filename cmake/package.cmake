# The systemd units and timers (installed with every install under PREFIX/share/bbkit/systemd,
# naming the PREFIX/bin of the install) and the Debian package: `scripts/package`, or by hand
#   cmake -S . -B build-package -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
#         -DBBKIT_PACKAGE_FILES=ON && cmake --build build-package && cd build-package &&
#   cpack -G DEB
# What the package holds and why: bbkit(7), FILES.
option(BBKIT_PACKAGE_FILES
  "Install what only the Debian package holds: /etc/bbkit/bbkit.toml, the units in /lib/systemd/system, tmpfiles.d and logrotate files, gzipped man pages and /usr/share/doc/bbkit"
  OFF)

set(BBKIT_BINDIR ${CMAKE_INSTALL_FULL_BINDIR})
file(GLOB BBKIT_UNIT_TEMPLATES ${PROJECT_SOURCE_DIR}/share/bbkit/systemd/*.service.in)
file(GLOB BBKIT_TIMERS ${PROJECT_SOURCE_DIR}/share/bbkit/systemd/*.timer)
set(BBKIT_UNITS ${BBKIT_TIMERS})
foreach(template ${BBKIT_UNIT_TEMPLATES})
  get_filename_component(unit ${template} NAME)
  string(REGEX REPLACE "\\.in$" "" unit ${unit})
  configure_file(${template} ${PROJECT_BINARY_DIR}/systemd/${unit} @ONLY)
  list(APPEND BBKIT_UNITS ${PROJECT_BINARY_DIR}/systemd/${unit})
endforeach()

set(debian ${PROJECT_SOURCE_DIR}/share/bbkit/debian)
if(NOT BBKIT_PACKAGE_FILES)
  # Filled in when installed, not when configured: `cmake --install --prefix P` gives units
  # naming P's bin (the prefix configured may be another).
  install(FILES ${BBKIT_TIMERS} DESTINATION ${CMAKE_INSTALL_DATADIR}/bbkit/systemd)
  foreach(template ${BBKIT_UNIT_TEMPLATES})
    get_filename_component(unit ${template} NAME)
    string(REGEX REPLACE "\\.in$" "" unit ${unit})
    install(CODE "
      if(IS_ABSOLUTE \"${CMAKE_INSTALL_BINDIR}\")
        set(BBKIT_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
      else()
        set(BBKIT_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
      endif()
      configure_file(\"${template}\" \"${PROJECT_BINARY_DIR}/systemd-installed/${unit}\" @ONLY)
      file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATADIR}/bbkit/systemd\"
        TYPE FILE FILES \"${PROJECT_BINARY_DIR}/systemd-installed/${unit}\")")
  endforeach()
else()
  # Absolute destinations: CPack stages them under DESTDIR (CPACK_SET_DESTDIR below).
  install(FILES ${BBKIT_UNITS} DESTINATION /lib/systemd/system)
  install(FILES ${debian}/bbkit.toml DESTINATION /etc/bbkit)
  install(FILES ${debian}/bbkit.logrotate DESTINATION /etc/logrotate.d RENAME bbkit)
  # Not CMAKE_INSTALL_LIBDIR: systemd-tmpfiles reads /usr/lib/tmpfiles.d, never a multiarch one.
  install(FILES ${debian}/bbkit.tmpfiles DESTINATION lib/tmpfiles.d RENAME bbkit.conf)
  # Debian wants man pages and the changelog compressed, reproducibly (gzip -n).
  find_program(GZIP_EXECUTABLE gzip REQUIRED)
  file(GLOB_RECURSE BBKIT_MAN_PAGES RELATIVE ${PROJECT_SOURCE_DIR}/man ${PROJECT_SOURCE_DIR}/man/*)
  foreach(page ${BBKIT_MAN_PAGES})
    get_filename_component(section ${page} DIRECTORY)
    set(gz ${PROJECT_BINARY_DIR}/man-gz/${page}.gz)
    add_custom_command(OUTPUT ${gz}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man-gz/${section}
      COMMAND ${GZIP_EXECUTABLE} -9n -c ${PROJECT_SOURCE_DIR}/man/${page} > ${gz}
      DEPENDS ${PROJECT_SOURCE_DIR}/man/${page} VERBATIM)
    list(APPEND BBKIT_MAN_GZ ${gz})
    install(FILES ${gz} DESTINATION ${CMAKE_INSTALL_MANDIR}/${section})
  endforeach()
  set(changelog_gz ${PROJECT_BINARY_DIR}/doc/changelog.gz)
  add_custom_command(OUTPUT ${changelog_gz}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/doc
    COMMAND ${GZIP_EXECUTABLE} -9n -c ${debian}/changelog > ${changelog_gz}
    DEPENDS ${debian}/changelog VERBATIM)
  add_custom_target(bbkit-package-docs ALL DEPENDS ${BBKIT_MAN_GZ} ${changelog_gz})
  install(FILES ${changelog_gz} ${debian}/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_NAME bbkit)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "bbkit maintainers <bbkit@localhost.invalid>" CACHE STRING
  "The package's Maintainer field")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "burst buffers for HPC batch jobs")
set(CPACK_PACKAGE_DESCRIPTION
  "bbkit manages burst buffers: job-scoped and persistent space on fast storage
that a batch job asks for in its script, reserved from a capacity pool, filled
before the job runs, handed to the job as a directory, drained after it and
torn down. It works standalone (prolog and epilog scripts) and with Slurm's
burst_buffer/lua plugin.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# libc6 and the rest come from dpkg-shlibdeps (libstdc++, SQLite and Boost are linked
# statically: BBKIT_STATIC_DEPS), among them libsodium, always shared (libsodium23); the
# maintainer scripts use init-system-helpers' programs.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "init-system-helpers (>= 1.54~)")
# install-slurm checks the Lua scripts with the luac of the Lua Slurm links (Debian's Slurm:
# 5.1) and writes a sudoers drop-in.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "lua5.1 | lua5.3 | lua5.4, sudo")
# jq: Spur's job_submit (share/bbkit/standalone/spur) reads the job spec with it.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "slurmctld, slurm-client, prometheus-node-exporter, jq")
configure_file(${debian}/conffiles ${PROJECT_BINARY_DIR}/debian/conffiles COPYONLY)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${PROJECT_BINARY_DIR}/debian/conffiles ${debian}/postinst ${debian}/prerm ${debian}/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# lintian (scripts/package --lintian) reports nothing else on Debian 12. The Maintainer address
# is a placeholder: a site that publishes the package sets -DCPACK_PACKAGE_CONTACT.
include(CPack)
