# Passed to llama.cpp's CMake as CMAKE_PROJECT_INCLUDE by install-llama-server.sh, which
# includes it after every project() call; it acts once, for llama.cpp's own project. At
# the end of the top-level directory every target outside ggml/ (the model graphs, the
# tokenizer, the chat templates, the HTTP server and its JSON) is compiled at -O1, which
# GCC takes over the Release -O3 before it; ggml's kernels, where a judgment's time goes,
# keep -O3. None of these files is built with -ffast-math or FMA flags, so -O1 computes
# what -O3 does; the server-judge tests' agreement checks pass with it.
if(PROJECT_NAME STREQUAL "llama.cpp" AND NOT JURY_LOW_OPT)
  set(JURY_LOW_OPT ON)
  function(jury_targets_below dir out)
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    foreach(sub IN LISTS subdirs)
      if(NOT sub MATCHES "/ggml($|/)")
        jury_targets_below("${sub}" more)
        list(APPEND targets ${more})
      endif()
    endforeach()
    set(${out} ${targets} PARENT_SCOPE)
  endfunction()
  function(jury_low_opt)
    jury_targets_below("${CMAKE_SOURCE_DIR}" targets)
    foreach(t IN LISTS targets)
      get_target_property(type ${t} TYPE)
      if(type MATCHES "LIBRARY$|EXECUTABLE" AND NOT type STREQUAL "INTERFACE_LIBRARY")
        target_compile_options(${t} PRIVATE -O1)
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL jury_low_opt)
endif()
