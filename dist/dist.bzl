"""The install tree of a C++ library as one relocatable tarball (see dist/BUILD)."""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def _archive_of(library):
    """The static archive Bazel built for one LibraryToLink (PIC preferred), or None."""
    return library.pic_static_library or library.static_library

def _exclude_libs(flags):
    """Third-party archives that linkopts name (a path, or -l:NAME.a) keep their symbols
    to themselves inside the shared library, so that a program may link its own copy."""
    names = [f.split("/")[-1].replace("-l:", "", 1) for f in flags if f.endswith(".a")]
    return ["-Wl,--exclude-libs," + ":".join(names)] if names else []

def _link_shared(ctx, cc_toolchain, archives, objects, flags):
    """lib<name>.so: every archive of the closure linked whole (a shared library has no
    main to pull members in), with the closure's link flags."""
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    libraries = [
        cc_common.create_library_to_link(
            actions = ctx.actions,
            feature_configuration = feature_configuration,
            cc_toolchain = cc_toolchain,
            pic_static_library = archive,
            alwayslink = True,
        )
        for archive in archives
    ]
    linking_context = cc_common.create_linking_context(
        linker_inputs = depset([cc_common.create_linker_input(
            owner = ctx.label,
            libraries = depset(libraries),
            user_link_flags = depset(flags),
        )]),
    )
    output = cc_common.link(
        actions = ctx.actions,
        name = ctx.attr.library_name,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        additional_inputs = objects,
        linking_contexts = [linking_context],
        user_link_flags = ["-Wl,-soname,lib%s.so" % ctx.attr.library_name] + _exclude_libs(flags) +
                          [o.path for o in objects],
        output_type = "dynamic_library",
    )
    return output.library_to_link.resolved_symlink_dynamic_library or output.library_to_link.dynamic_library

def _cc_dist_impl(ctx):
    cc_info = ctx.attr.lib[CcInfo]
    cc_toolchain = find_cpp_toolchain(ctx)

    # The whole link closure, as Bazel would hand it to a linker: each target's archive
    # (or loose objects) and the flags its linkopts add (system libraries, third-party
    # archives given by path or as -l:NAME.a).
    archives = []
    objects = []
    flags = []
    for linker_input in cc_info.linking_context.linker_inputs.to_list():
        for library in linker_input.libraries:
            archive = _archive_of(library)
            if archive:
                archives.append(archive)
            else:
                objects.extend(library.pic_objects or library.objects or [])
        for flag in linker_input.user_link_flags:
            if flag not in flags:
                flags.append(flag)

    shared_lib = _link_shared(ctx, cc_toolchain, archives, objects, flags)

    inputs_list = ctx.actions.declare_file(ctx.label.name + ".inputs")
    ctx.actions.write(inputs_list, "".join(["%s\n" % f.path for f in archives + objects]))
    flags_list = ctx.actions.declare_file(ctx.label.name + ".flags")
    ctx.actions.write(flags_list, "".join(["%s\n" % f for f in flags]))

    # Every header of the closure, "short_path path": the packager installs the public
    # headers and, following their #include "...", each header they reach.
    headers = cc_info.compilation_context.headers.to_list()
    header_map = ctx.actions.declare_file(ctx.label.name + ".headers")
    ctx.actions.write(header_map, "".join(["%s %s\n" % (h.short_path, h.path) for h in headers]))

    out = ctx.actions.declare_file(ctx.label.name + ".tar.gz")
    templates = [
        ctx.file.pc_template,
        ctx.file.pc_static_template,
        ctx.file.cmake_config_template,
        ctx.file.cmake_version_template,
    ]
    args = ctx.actions.args()
    args.add("--out", out)
    args.add("--name", ctx.attr.library_name)
    args.add("--version", ctx.attr.version)
    args.add("--description", ctx.attr.description)
    args.add("--cc", cc_toolchain.compiler_executable)
    args.add("--ar", cc_toolchain.ar_executable)
    args.add("--inputs", inputs_list)
    args.add("--flags", flags_list)
    args.add("--headers", header_map)
    args.add("--shared", shared_lib)
    args.add("--pc-template", ctx.file.pc_template)
    args.add("--pc-static-template", ctx.file.pc_static_template)
    args.add("--cmake-config-template", ctx.file.cmake_config_template)
    args.add("--cmake-version-template", ctx.file.cmake_version_template)
    for launcher in ctx.files.bins:
        args.add("--bin", launcher)
    for hdr in ctx.files.public_hdrs:
        args.add("--public", hdr.short_path)

    ctx.actions.run(
        executable = ctx.executable._packager,
        arguments = [args],
        inputs = depset(
            [inputs_list, flags_list, header_map, shared_lib] + archives + objects +
            ctx.files.bins + ctx.files.public_hdrs + templates,
            transitive = [cc_info.compilation_context.headers, cc_toolchain.all_files],
        ),
        outputs = [out],
        mnemonic = "CcDist",
        progress_message = "Packaging the install tree %s" % out.short_path,
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

cc_dist = rule(
    implementation = _cc_dist_impl,
    doc = """A relocatable install tree: lib/lib<name>.so and lib/lib<name>.a (the whole
    link closure of `lib`, third-party archives included), include/<name>/ (the public
    headers and every header they include), pkg-config and CMake package files, bin/.""",
    attrs = {
        "lib": attr.label(mandatory = True, providers = [CcInfo]),
        "public_hdrs": attr.label_list(mandatory = True, allow_files = [".h"]),
        "bins": attr.label_list(cfg = "target", allow_files = True),
        "library_name": attr.string(mandatory = True),
        "version": attr.string(mandatory = True),
        "description": attr.string(mandatory = True),
        # @NAME@, @VERSION@, @DESCRIPTION@ and @LIBS_PRIVATE@ (the link flags a static
        # link of the archive needs; @CMAKE_LIBS_PRIVATE@: the same as a CMake list)
        # are substituted.
        "pc_template": attr.label(mandatory = True, allow_single_file = True),
        "pc_static_template": attr.label(mandatory = True, allow_single_file = True),
        "cmake_config_template": attr.label(mandatory = True, allow_single_file = True),
        "cmake_version_template": attr.label(mandatory = True, allow_single_file = True),
        "_packager": attr.label(
            default = "//dist:make_dist",
            executable = True,
            cfg = "exec",
        ),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    incompatible_use_toolchain_transition = True,
)
