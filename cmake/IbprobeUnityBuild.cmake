# Unity batches whose text is the same in every clone of the tree.
#
# CMake's own unity build (CMAKE_UNITY_BUILD) writes each batch as #include lines with absolute
# paths. A batch's text is part of what ccache hashes, so a clone in another directory, or the
# package's build, compiled every batch again: a second run of test.sh from a fresh clone with a
# warm cache spent 278 s in the ASan build, against 33 s for the TSan build, which has no batches.
# Here each batch includes its sources by their path relative to the batch file, so two build
# directories at the same place in two clones write the same batches, and ccache (with its
# base_dir at the tree's root) finds the objects of the other.
#
# ibprobe_unity_build() batches the C++ sources of every library and executable defined so far,
# eight to a batch in the order the target lists them, as CMake's unity build does. A source with
# its own compile definitions, options or include directories compiles on its own, as with CMake's.

set(IBPROBE_UNITY_BATCH_SIZE 8)

function(ibprobe_unity_targets out dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    ibprobe_unity_targets(sub_targets "${sub}")
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# The absolute paths of TARGET's C++ sources.
function(ibprobe_unity_sources out target)
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  set(paths)
  foreach(source IN LISTS sources)
    if(source MATCHES "\\.cpp$" AND NOT source MATCHES "\\$<")
      cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY "${source_dir}" NORMALIZE
                 OUTPUT_VARIABLE path)
      list(APPEND paths "${path}")
    endif()
  endforeach()
  set(${out} ${paths} PARENT_SCOPE)
endfunction()

# SHARED: sources that more than one target compiles. Batching marks a source as a header (a
# property of the file, not of the target), which would take it out of the other target.
function(ibprobe_unity_batch_target target shared)
  ibprobe_unity_sources(paths ${target})
  get_target_property(source_dir ${target} SOURCE_DIR)
  set(batchable)
  foreach(path IN LISTS paths)
    set(own)
    if(path IN_LIST shared)
      set(own shared)
    endif()
    foreach(property IN ITEMS COMPILE_DEFINITIONS COMPILE_OPTIONS COMPILE_FLAGS
                              INCLUDE_DIRECTORIES GENERATED SKIP_UNITY_BUILD_INCLUSION)
      get_source_file_property(value "${path}" DIRECTORY "${source_dir}" ${property})
      if(value)
        set(own ${property})
      endif()
    endforeach()
    if(NOT own)
      list(APPEND batchable "${path}")
    endif()
  endforeach()
  list(LENGTH batchable count)
  if(count LESS 2)
    return()
  endif()

  set(batch_dir "${CMAKE_BINARY_DIR}/unity/${target}")
  set(batches)
  set(text)
  set(in_batch 0)
  list(GET batchable -1 last)
  foreach(path IN LISTS batchable)
    file(RELATIVE_PATH relative "${batch_dir}" "${path}")
    string(APPEND text "#include \"${relative}\"\n")
    math(EXPR in_batch "${in_batch} + 1")
    if(in_batch EQUAL IBPROBE_UNITY_BATCH_SIZE OR path STREQUAL last)
      list(LENGTH batches batch)
      set(file "${batch_dir}/batch_${batch}.cpp")
      # Written only when the text changes, so that reconfiguring rebuilds nothing.
      file(CONFIGURE OUTPUT "${file}" CONTENT "${text}" @ONLY)
      list(APPEND batches "${file}")
      set(text)
      set(in_batch 0)
    endif()
  endforeach()
  set_source_files_properties(${batchable} DIRECTORY "${source_dir}" PROPERTIES HEADER_FILE_ONLY ON)
  target_sources(${target} PRIVATE ${batches})
endfunction()

function(ibprobe_unity_build)
  ibprobe_unity_targets(all_targets "${PROJECT_SOURCE_DIR}")
  set(targets)
  set(seen)
  set(shared)
  foreach(target IN LISTS all_targets)
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
      list(APPEND targets ${target})
      ibprobe_unity_sources(paths ${target})
      foreach(path IN LISTS paths)
        if(path IN_LIST seen)
          list(APPEND shared "${path}")
        endif()
        list(APPEND seen "${path}")
      endforeach()
    endif()
  endforeach()
  foreach(target IN LISTS targets)
    ibprobe_unity_batch_target(${target} "${shared}")
  endforeach()
endfunction()
