# cmake -DPROGRAM=path -DNAME=name -DSUMMARY=text -DOUT=file.1 -P man.cmake: a man page made from `PROGRAM --help`,
# so that the page never disagrees with the program. The help text goes in verbatim (no fill), under DESCRIPTION.
execute_process(COMMAND ${PROGRAM} --help OUTPUT_VARIABLE help ERROR_VARIABLE help_err RESULT_VARIABLE rc)
string(APPEND help "${help_err}")
if(help STREQUAL "")
  message(FATAL_ERROR "${PROGRAM} --help printed nothing (exit ${rc})")
endif()
# roff: a backslash is an escape, and a line that starts with . or ' is a request.
string(REPLACE "\\" "\\e" help "${help}")
string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" help "${help}")
string(TIMESTAMP date "%Y-%m-%d" UTC)
string(TOUPPER "${NAME}" upper)
file(WRITE ${OUT} ".TH ${upper} 1 \"${date}\" \"cohort ${VERSION}\" \"cohort manual\"
.SH NAME
${NAME} \\- ${SUMMARY}
.SH DESCRIPTION
.nf
${help}.fi
.SH SEE ALSO
The cohort documentation: docs/ in the source tree (docs/cohortrun.md, docs/training.md, docs/env.md).
")
