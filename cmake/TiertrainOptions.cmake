# Tri-state options (ON, OFF, AUTO) for optional dependencies.
#   ON   the dependency is required: configuring fails without it
#   AUTO (default) used when found
#   OFF  never used

function(tt_tristate_option name doc)
  set(${name} AUTO CACHE STRING "${doc}: ON, OFF or AUTO")
  set_property(CACHE ${name} PROPERTY STRINGS ON OFF AUTO)
  string(TOUPPER "${${name}}" value)
  if(NOT value MATCHES "^(ON|OFF|AUTO)$")
    message(FATAL_ERROR "${name} must be ON, OFF or AUTO, not '${${name}}'")
  endif()
  set(${name} ${value} PARENT_SCOPE)
endfunction()

# Prints what an option resolved to; fails when it was ON and the dependency is missing.
function(tt_report_option name found_var detail)
  if(${found_var})
    message(STATUS "tiertrain: ${name}=${${name}}: found, enabled (${detail})")
  elseif(${name} STREQUAL "ON")
    message(FATAL_ERROR "tiertrain: ${name}=ON but the dependency was not found")
  elseif(${name} STREQUAL "OFF")
    message(STATUS "tiertrain: ${name}=OFF: disabled")
  else()
    message(STATUS "tiertrain: ${name}=AUTO: not found, disabled")
  endif()
endfunction()
