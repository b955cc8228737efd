# cmake -DIN=file -DOUT=file.inc -P embed_text.cmake: `IN` as one C++ raw string literal (the cuda backend's PTX).
file(READ "${IN}" text)
file(WRITE "${OUT}" "R\"pvmm_embedded(${text})pvmm_embedded\"\n")
