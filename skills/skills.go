// Package skills stores saved scripts ("skills"): one <name>.ts file each
// in a directory opened with os.Root, written atomically, patched with
// literal SEARCH/REPLACE blocks that apply all-or-nothing.
package skills
